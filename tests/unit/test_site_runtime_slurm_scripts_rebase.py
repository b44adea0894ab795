"""Version 3 of the staged Slurm scripts with several Runs of one branch at once, run with
bash on real git repositories: when the branch moved on, stage-out fetches it, rebases this
Run's commits onto it and pushes again (a bounded number of times); a conflict pushes
nothing; version 2 stays as it was (refused at once)."""

from __future__ import annotations

import hashlib
import threading
import time

from tests.unit.slurm_scripts_support import (
    another_runs_commit,
    checked_out_with_change,
    pre_receive,
    reported,
    sh,
    stage_out,
    two_runs,
)


def test_version_3_rebases_onto_what_another_run_pushed_first(tmp_path):
    remote, first, second = two_runs(tmp_path)
    (first / "first.txt").write_text("1\n")
    (second / "second.txt").write_text("2\n")
    one = stage_out(tmp_path, remote, "run-1")
    assert one.returncode == 0, one.stdout + one.stderr
    two = stage_out(tmp_path, remote, "run-2", METALLO_PUSH_RETRY_SECONDS="30")
    assert two.returncode == 0, two.stdout + two.stderr
    assert "the branch moved on (another Run pushed first): rebasing onto it" in two.stdout
    assert "trying again" not in two.stdout
    head = sh("git", "rev-parse", "refs/heads/main", cwd=remote)
    assert reported(two) == head
    assert sh("git", "rev-parse", f"{head}^", cwd=remote) == reported(one)
    assert sh("git", "ls-tree", "--name-only", head, cwd=remote).split() == [
        "README",
        "first.txt",
        "second.txt",
    ]
    # The rebased commit keeps the fixed identity (the job has none of its own).
    assert sh("git", "log", "-1", "--format=%an <%ae> %cn <%ce>", head, cwd=remote) == (
        "Metallo <metallo@localhost> Metallo <metallo@localhost>"
    )
    assert "prt_secret" not in two.stdout + two.stderr


def test_version_3_pushes_nothing_when_the_outputs_conflict(tmp_path):
    remote, first, second = two_runs(tmp_path)
    (first / "metrics.txt").write_text("0.9\n")
    (second / "metrics.txt").write_text("0.8\n")
    one = stage_out(tmp_path, remote, "run-1")
    assert one.returncode == 0, one.stdout + one.stderr
    two = stage_out(tmp_path, remote, "run-2")
    assert two.returncode == 87, two.stdout + two.stderr
    assert (
        "the outputs conflict with what another Run pushed to main first; nothing pushed"
        in two.stdout
    )
    assert "metallo-output-commit=" not in two.stdout
    assert sh("git", "rev-parse", "refs/heads/main", cwd=remote) == reported(one)
    # The rebase was aborted: the checkout is back on this Run's own commit.
    assert not (second / ".git" / "rebase-merge").exists()
    assert (second / "metrics.txt").read_text() == "0.8\n"


def test_version_2_still_refuses_a_branch_that_moved_on(tmp_path):
    remote, first, second = two_runs(tmp_path)
    (first / "first.txt").write_text("1\n")
    (second / "second.txt").write_text("2\n")
    one = stage_out(tmp_path, remote, "run-1", version=2)
    assert one.returncode == 0, one.stdout + one.stderr
    two = stage_out(tmp_path, remote, "run-2", version=2)
    assert two.returncode == 87 and "push refused" in two.stdout
    assert "rebasing" not in two.stdout
    assert sh("git", "rev-parse", "refs/heads/main", cwd=remote) == reported(one)


def test_version_3_pushes_rebased_lfs_outputs_through_the_pre_push_hook(tmp_path):
    remote, first, second = two_runs(tmp_path, lfs=True)
    (first / "one.bin").write_bytes(b"one" * 500)
    (second / "two.bin").write_bytes(b"two" * 500)
    one = stage_out(tmp_path, remote, "run-1")
    assert one.returncode == 0, one.stdout + one.stderr
    two = stage_out(tmp_path, remote, "run-2")
    assert two.returncode == 0, two.stdout + two.stderr
    assert "rebasing onto it" in two.stdout
    head = reported(two)
    assert sh("git", "rev-parse", f"{head}^", cwd=remote) == reported(one)
    for name, data in (("one.bin", b"one" * 500), ("two.bin", b"two" * 500)):
        pointer = sh("git", "show", f"{head}:{name}", cwd=remote)
        assert pointer.startswith("version https://git-lfs.github.com/spec/v1"), pointer
        oid = hashlib.sha256(data).hexdigest()
        assert f"oid sha256:{oid}" in pointer
        # Each Run's object reached the remote's LFS store (the second's through the
        # pre-push hook, after the rebase).
        assert (remote / "lfs" / "objects" / oid[:2] / oid[2:4] / oid).read_bytes() == data


def test_version_3_rebases_when_the_branch_moves_during_the_push(tmp_path):
    """The race of many Runs at once: the server's ref lock finds another value
    ("[remote rejected] … (failed to update ref)", "… but expected …")."""
    remote, _ = checked_out_with_change(tmp_path)
    theirs = another_runs_commit(tmp_path, remote)
    pre_receive(remote, f'git update-ref refs/heads/main {theirs}\nrm -f -- "$0"\n')
    done = stage_out(tmp_path, remote, "ws", METALLO_PUSH_RETRY_SECONDS="30")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[remote rejected]" in done.stdout and "but expected" in done.stdout
    assert "rebasing onto it" in done.stdout and "trying again" not in done.stdout
    head = sh("git", "rev-parse", "refs/heads/main", cwd=remote)
    assert reported(done) == head and sh("git", "rev-parse", f"{head}^", cwd=remote) == theirs
    assert sh("git", "ls-tree", "--name-only", head, cwd=remote).split() == [
        "README",
        "metrics.txt",
        "theirs.txt",
    ]


def test_version_3_gives_up_after_10_rebases(tmp_path):
    remote, _ = checked_out_with_change(tmp_path)
    # Another Run lands before every push of this one.
    pre_receive(
        remote,
        "export GIT_AUTHOR_NAME=o GIT_AUTHOR_EMAIL=o@o GIT_COMMITTER_NAME=o "
        "GIT_COMMITTER_EMAIL=o@o\n"
        "head=$(git rev-parse refs/heads/main)\n"
        'new=$(echo another | git commit-tree "$head^{tree}" -p "$head")\n'
        'git update-ref refs/heads/main "$new"\n',
    )
    done = stage_out(tmp_path, remote, "ws", METALLO_PUSH_RETRY_SECONDS="30")
    assert done.returncode == 87, done.stdout + done.stderr
    assert done.stdout.count("rebasing onto it") == 10 and "(round 10 of 10)" in done.stdout
    assert "the branch moved on again after 10 rebases; nothing pushed" in done.stdout
    assert "metallo-output-commit=" not in done.stdout
    assert sh("git", "log", "-1", "--format=%s", "refs/heads/main", cwd=remote) == "another"


def test_version_3_does_not_rebase_onto_a_rewritten_branch(tmp_path):
    # A rebase onto a force-pushed branch would bring the removed history back with
    # this Run's commits: nothing is pushed.
    remote, _first, second = two_runs(tmp_path)
    other = tmp_path / "rewritten"
    sh("git", "init", "-q", "-b", "main", str(other), cwd=tmp_path)
    (other / "new.txt").write_text("history rewritten\n")
    sh("git", "add", "-A", cwd=other)
    sh("git", "-c", "user.name=o", "-c", "user.email=o@o", "commit", "-qm", "unrelated", cwd=other)
    sh("git", "push", "-q", "--force", f"file://{remote}", "HEAD:refs/heads/main", cwd=other)
    forced = sh("git", "rev-parse", "HEAD", cwd=other)
    (second / "second.txt").write_text("2\n")
    done = stage_out(tmp_path, remote, "run-2", METALLO_PUSH_RETRY_SECONDS="30")
    assert done.returncode == 87, done.stdout + done.stderr
    assert "was rewritten" in done.stdout and "metallo-output-commit=" not in done.stdout
    assert sh("git", "rev-parse", "refs/heads/main", cwd=remote) == forced


def test_version_3_names_no_output_commit_for_outputs_the_branch_already_holds(tmp_path):
    remote, first, second = two_runs(tmp_path)
    (first / "metrics.txt").write_text("same\n")
    (second / "metrics.txt").write_text("same\n")
    assert stage_out(tmp_path, remote, "run-1").returncode == 0
    time.sleep(1.1)  # another second: not the very same commit (same tree, parent, identity)
    two = stage_out(tmp_path, remote, "run-2", METALLO_PUSH_RETRY_SECONDS="30")
    assert two.returncode == 0, two.stdout + two.stderr
    assert "already holds these outputs; nothing pushed" in two.stdout
    assert "metallo-output-commit=" not in two.stdout


def test_version_3_takes_a_ref_lock_still_held_for_a_moved_branch(tmp_path):
    # Git waits only 100 ms for a ref's lock; with ten Runs at once a push can find it
    # still held ("….lock': File exists"): no refusal for good.
    remote, _first, second = two_runs(tmp_path)
    lock = remote / "refs" / "heads" / "main.lock"
    lock.write_text("")
    release = threading.Timer(1.0, lock.unlink)
    release.start()
    (second / "second.txt").write_text("2\n")
    try:
        done = stage_out(tmp_path, remote, "run-2", METALLO_PUSH_RETRY_SECONDS="30")
    finally:
        release.join()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "File exists" in done.stdout and "rebasing onto it" in done.stdout
    assert reported(done) == sh("git", "rev-parse", "refs/heads/main", cwd=remote)
