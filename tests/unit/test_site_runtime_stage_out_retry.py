"""Stage-out tries a failed push again (a new user restarted the dev stack while a
Run's stage-out pushed to the lab Git server, and the Run failed for good)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from site_runtime.adaptors.local import stage_git
from site_runtime.adaptors.local.stage_runner import Runner, Stopped

ENV = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a",
       "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"}


def sh(*args: str, cwd: Path) -> str:
    return subprocess.run(args, cwd=cwd, check=True, env=ENV, capture_output=True,
                          text=True).stdout.strip()


def checked_out(tmp_path: Path) -> tuple[Runner, Path]:
    remote, src = tmp_path / "remote.git", tmp_path / "src"
    sh("git", "init", "-q", "--bare", str(remote), cwd=tmp_path)
    sh("git", "init", "-q", str(src), cwd=tmp_path)
    (src / "README").write_text("demo\n")
    sh("git", "add", "-A", cwd=src)
    sh("git", "commit", "-qm", "first", cwd=src)
    sh("git", "push", "-q", f"file://{remote}", "HEAD:refs/heads/main", cwd=src)
    repo, control = tmp_path / "repo", tmp_path / "control"
    repo.mkdir()
    control.mkdir()
    spec = {"repo_dir": str(repo), "log_file": str(tmp_path / "stage.log"), "stage": "stage-in",
            "author": {"name": "Metallo", "email": "metallo@localhost"}, "message": "outputs",
            "repository": {"url": f"file://{remote}", "commit": sh("git", "rev-parse", "HEAD",
                                                                   cwd=src), "branch": "main"}}
    r = Runner(control, spec, credentials={})
    r.deadline = time.monotonic() + 60
    assert r.stage_in() == {"exit_code": 0}
    return r, remote


def test_a_push_that_fails_at_first_is_tried_again(tmp_path, monkeypatch):
    monkeypatch.setattr(stage_git, "PUSH_RETRY_SECONDS", (0.3, 0.3, 0.3, 0.3))
    r, remote = checked_out(tmp_path)
    (Path(r.spec["repo_dir"]) / "metrics.txt").write_text("0.9\n")
    away = remote.with_name("away.git")
    remote.rename(away)  # the Git server is gone for a moment…
    back = threading.Timer(0.5, away.rename, args=(remote,))  # …and back
    back.start()
    try:
        out = r.stage_out()
    finally:
        back.join()
    assert out["exit_code"] == 0 and out["output_commit"]
    assert sh("git", "rev-parse", "refs/heads/main", cwd=remote) == out["output_commit"]
    assert "trying again in 0.3 s" in (tmp_path / "stage.log").read_text()


def test_a_push_that_keeps_failing_fails_the_stage_after_the_last_try(tmp_path, monkeypatch):
    monkeypatch.setattr(stage_git, "PUSH_RETRY_SECONDS", (0.05, 0.05))
    r, remote = checked_out(tmp_path)
    (Path(r.spec["repo_dir"]) / "metrics.txt").write_text("0.9\n")
    remote.rename(remote.with_name("gone.git"))
    out = r.stage_out()
    assert out["exit_code"] != 0 and out["code"] == "stage-out-failed"
    assert (tmp_path / "stage.log").read_text().count("trying again") == 2


def test_cancellation_ends_the_wait_between_tries(tmp_path):
    r, _ = checked_out(tmp_path)
    threading.Timer(0.2, setattr, args=(r, "cancelled", True)).start()
    began = time.monotonic()
    with pytest.raises(Stopped):
        r.pause(30)
    assert time.monotonic() - began < 5


def test_a_push_refused_for_good_is_not_tried_again(tmp_path, monkeypatch):
    """A remote that refuses the update for good (here its pre-receive hook) refuses
    every try: stage-out fails at once instead of after a minute of retries (found in
    review)."""
    monkeypatch.setattr(stage_git, "PUSH_RETRY_SECONDS", (5.0, 5.0))
    r, remote = checked_out(tmp_path)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'no pushes here' >&2\nexit 1\n")
    hook.chmod(0o755)
    (Path(r.spec["repo_dir"]) / "metrics.txt").write_text("0.9\n")
    began = time.monotonic()
    out = r.stage_out()
    assert out["code"] == "stage-out-failed" and time.monotonic() - began < 4
    log = (tmp_path / "stage.log").read_text()
    assert "trying again" not in log and "rebasing" not in log


def push_from_elsewhere(tmp_path: Path, remote: Path, name: str, text: str) -> str:
    """Another Run's outputs reach the branch first; returns the commit it pushed."""
    other = tmp_path / f"other-{name}"
    sh("git", "clone", "-q", "-b", "main", f"file://{remote}", str(other), cwd=tmp_path)
    (other / name).write_text(text)
    sh("git", "add", "-A", cwd=other)
    sh("git", "commit", "-qm", "another Run's outputs", cwd=other)
    sh("git", "push", "-q", "origin", "HEAD:main", cwd=other)
    return sh("git", "rev-parse", "HEAD", cwd=other)


@pytest.fixture(autouse=True)
def quick_rebase_pauses(monkeypatch):
    monkeypatch.setattr(stage_git, "REBASE_PAUSE_SECONDS", (0.0, 0.05))


def test_a_branch_that_moved_on_gets_this_runs_outputs_on_top(tmp_path):
    # Several Runs of one branch at once: each keeps its outputs. A branch that moved
    # on is fetched,
    # this Run's commits rebased onto it and pushed again.
    r, remote = checked_out(tmp_path)
    theirs = push_from_elsewhere(tmp_path, remote, "theirs.txt", "first\n")
    (Path(r.spec["repo_dir"]) / "ours.txt").write_text("second\n")
    out = r.stage_out()
    assert out["exit_code"] == 0, (tmp_path / "stage.log").read_text()
    head = sh("git", "rev-parse", "main", cwd=remote)
    assert out["output_commit"] == head
    assert sh("git", "rev-parse", f"{head}^", cwd=remote) == theirs
    assert sh("git", "show", f"{head}:theirs.txt", cwd=remote) == "first"
    assert sh("git", "show", f"{head}:ours.txt", cwd=remote) == "second"
    assert "moved on (another Run pushed first): rebasing onto it" in (
        tmp_path / "stage.log").read_text()


def test_outputs_that_conflict_with_the_other_runs_fail_and_push_nothing(tmp_path):
    r, remote = checked_out(tmp_path)
    theirs = push_from_elsewhere(tmp_path, remote, "metrics.txt", "theirs\n")
    (Path(r.spec["repo_dir"]) / "metrics.txt").write_text("ours\n")
    out = r.stage_out()
    assert out["code"] == "stage-out-failed"
    assert sh("git", "rev-parse", "main", cwd=remote) == theirs  # theirs stands
    assert "conflict with what another Run pushed to main first" in (
        tmp_path / "stage.log").read_text()
    status = sh("git", "status", "--porcelain", cwd=Path(r.spec["repo_dir"]))
    assert "UU" not in status  # the rebase was aborted, not left half done


def test_losing_the_race_for_the_refs_lock_is_a_moved_branch_too(tmp_path):
    # Seen on the Slurm lab with two Runs at once: the other push updated the ref
    # between the server's advertisement and this one's update. A pre-receive hook
    # plays that once (git's own words), after moving the branch itself.
    r, remote = checked_out(tmp_path)
    theirs = push_from_elsewhere(tmp_path, remote, "theirs.txt", "first\n")
    hook = remote / "hooks" / "pre-receive"
    marker = tmp_path / "raced"
    hook.write_text(
        "#!/bin/sh\n"
        f"if [ ! -e {marker} ]; then touch {marker}; "
        "echo \"error: cannot lock ref 'refs/heads/main': is at aaaa but expected bbbb\" >&2; "
        "exit 1; fi\n")
    hook.chmod(0o755)
    (Path(r.spec["repo_dir"]) / "ours.txt").write_text("second\n")
    out = r.stage_out()
    assert out["exit_code"] == 0, (tmp_path / "stage.log").read_text()
    head = sh("git", "rev-parse", "main", cwd=remote)
    assert out["output_commit"] == head and sh("git", "rev-parse", f"{head}^", cwd=remote) == theirs


def test_a_rewritten_branch_is_not_rebased_onto(tmp_path):
    # A rebase onto a force-pushed branch would bring the removed history back with
    # this Run's commits: nothing is pushed.
    r, remote = checked_out(tmp_path)
    other = tmp_path / "rewritten"
    sh("git", "init", "-q", "-b", "main", str(other), cwd=tmp_path)
    (other / "new.txt").write_text("history rewritten\n")
    sh("git", "add", "-A", cwd=other)
    sh("git", "commit", "-qm", "unrelated", cwd=other)
    sh("git", "push", "-q", "--force", f"file://{remote}", "HEAD:refs/heads/main", cwd=other)
    forced = sh("git", "rev-parse", "HEAD", cwd=other)
    (Path(r.spec["repo_dir"]) / "ours.txt").write_text("second\n")
    out = r.stage_out()
    assert out["code"] == "stage-out-failed"
    assert sh("git", "rev-parse", "main", cwd=remote) == forced
    assert "was rewritten" in (tmp_path / "stage.log").read_text()


def test_outputs_the_branch_already_holds_report_no_output_commit(tmp_path):
    # The rebase drops a commit whose change is already on the branch: this Run then
    # has nothing of its own there, and names no other Run's commit as its output.
    r, remote = checked_out(tmp_path)
    push_from_elsewhere(tmp_path, remote, "metrics.txt", "same\n")
    (Path(r.spec["repo_dir"]) / "metrics.txt").write_text("same\n")
    out = r.stage_out()
    assert out == {"exit_code": 0, "output_commit": None}, (tmp_path / "stage.log").read_text()


def test_a_merge_compute_made_is_kept_by_the_rebase(tmp_path):
    r, remote = checked_out(tmp_path)
    repo = Path(r.spec["repo_dir"])
    sh("git", "checkout", "-q", "-b", "side", cwd=repo)
    (repo / "side.txt").write_text("side\n")
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-qm", "side", cwd=repo)
    sh("git", "checkout", "-q", "main", cwd=repo)
    (repo / "main.txt").write_text("main\n")
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-qm", "main work", cwd=repo)
    sh("git", "merge", "-q", "--no-ff", "-m", "merge side", "side", cwd=repo)
    theirs = push_from_elsewhere(tmp_path, remote, "theirs.txt", "first\n")
    out = r.stage_out()
    assert out["exit_code"] == 0, (tmp_path / "stage.log").read_text()
    head = sh("git", "rev-parse", "main", cwd=remote)
    assert sh("git", "rev-list", "--merges", "--count", f"{theirs}..{head}", cwd=remote) == "1"
    assert sh("git", "merge-base", "--is-ancestor", theirs, head, cwd=remote) == ""


def test_a_ref_lock_another_push_still_holds_is_a_moved_branch_too(tmp_path):
    # Git waits only 100 ms for a ref's lock: with ten Runs at once a push can find it
    # still held ("….lock': File exists"). That is no refusal for good.
    r, remote = checked_out(tmp_path)
    lock = remote / "refs" / "heads" / "main.lock"
    lock.write_text("")
    log_file = tmp_path / "stage.log"

    def unlock_once_a_push_found_it_held() -> None:
        # Released only after a push met the lock, however slow the machine is.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log_file.exists() and "File exists" in log_file.read_text(errors="replace"):
                break
            time.sleep(0.05)
        lock.unlink()

    release = threading.Thread(target=unlock_once_a_push_found_it_held)
    release.start()
    (Path(r.spec["repo_dir"]) / "ours.txt").write_text("second\n")
    try:
        out = r.stage_out()
    finally:
        release.join()
    log = (tmp_path / "stage.log").read_text()
    assert out["exit_code"] == 0, log
    assert "File exists" in log and "rebasing onto it" in log
    assert out["output_commit"] == sh("git", "rev-parse", "main", cwd=remote)
