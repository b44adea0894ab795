"""The staged Slurm Attempt's bash scripts, run with bash on real git repositories
(outside Slurm: the script is the same text the job runs; tests/slurm run it in jobs).

Version 2 (seed 000, Staged Slurm batch execution, with the local executor's push
retry): stage-out tries a failed push again unless git refused it for good, and a
scancel ends its wait at once; stage-in pulls LFS objects only when a file needs them.
Version 1 stays byte for byte what it was, for Attempts prepared with it.

Version 3 (a new user's report: of ten Runs of one branch at once, nine lost their
outputs to a non-fast-forward refusal): when the branch moved on, stage-out fetches it,
rebases this Run's commits onto it and pushes again, at most 5 times; a conflict pushes
nothing. Version 2 stays as it was (refused at once).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from site_runtime.adaptors.slurm.scripts import (
    SCRIPT_VERSION,
    SCRIPTS_BY_VERSION,
    UnknownScriptVersion,
    scripts_for,
)

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@a",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@a",
}
LFS = [
    "-c",
    "filter.lfs.clean=git-lfs clean -- %f",
    "-c",
    "filter.lfs.process=git-lfs filter-process",
    "-c",
    "filter.lfs.required=true",
]

#: sha256 of version 1's texts as Attempts prepared before version 2 recorded them.
VERSION_1 = {
    "stage-in": "b26d63f0d86d8fc501ac1e7db2c82fced19fc15d174be50b73eb4ebc00a0d258",
    "compute": "87e24d7ae6b96dcac2b3d73dceebea7136a65e93376463034b7f62740f8ff74a",
    "stage-out": "10d0a0865c753dae4d5b0aca3f03bf41c3bf0ee9c93a396727e77137ceeef226",
}


def sh(*args: str, cwd: Path) -> str:
    return subprocess.run(
        args, cwd=cwd, check=True, env=GIT_ENV, capture_output=True, text=True
    ).stdout.strip()


#: remote -> the commit a Run of it was pinned to (what stage-out's environment names).
INPUT_COMMITS: dict[Path, str] = {}


def repository(tmp_path: Path, *, lfs: bool = False) -> tuple[Path, str]:
    """A bare repository with one commit on main (model.bin under LFS when ``lfs``)."""
    remote, src = tmp_path / "remote.git", tmp_path / "src"
    sh("git", "init", "-q", "--bare", str(remote), cwd=tmp_path)
    sh("git", "init", "-q", str(src), cwd=tmp_path)
    (src / "README").write_text("demo\n")
    if lfs:
        (src / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
        (src / "model.bin").write_bytes(b"weights" * 1000)
    sh("git", *LFS, "add", "-A", cwd=src)
    sh("git", "commit", "-qm", "first", cwd=src)
    if lfs:
        sh("git", "lfs", "push", "--all", f"file://{remote}", cwd=src)
    sh("git", "push", "-q", "--no-verify", f"file://{remote}", "HEAD:refs/heads/main", cwd=src)
    INPUT_COMMITS[remote] = sh("git", "rev-parse", "HEAD", cwd=src)
    return remote, INPUT_COMMITS[remote]


def stage_env(tmp_path: Path, stage: str, remote: Path, **extra: str) -> dict[str, str]:
    """What the rendered job's environment holds for ``stage`` (plus a recording git-lfs)."""
    ws = tmp_path / "ws"
    return {
        "PATH": f"{tmp_path / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": str(ws),
        "METALLO_STAGE": stage,
        "METALLO_WORKSPACE": str(ws),
        "METALLO_REPOSITORY_URL": f"file://{remote}",
        "METALLO_GIT_USERNAME": "grant",
        "METALLO_GIT_PASSWORD": "prt_secret",
        "METALLO_COMMIT_MESSAGE": "outputs",
        "METALLO_OUTPUT_BRANCH": "main",
        "METALLO_COMMIT": INPUT_COMMITS.get(remote, ""),
        **extra,
    }


def recording_git_lfs(tmp_path: Path) -> Path:
    """A ``git-lfs`` first on PATH that notes its arguments, then runs the real one."""
    real = subprocess.run(
        ["sh", "-c", "command -v git-lfs"], capture_output=True, text=True, check=True
    ).stdout.strip()
    bin_dir, calls = tmp_path / "bin", tmp_path / "lfs-calls"
    bin_dir.mkdir()
    wrapper = bin_dir / "git-lfs"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return calls


def run_script(text: str, env: dict[str, str], cwd: Path, timeout: float = 120):
    return subprocess.run(
        ["bash", "-c", text], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def stage_in(tmp_path: Path, remote: Path, commit: str, version: int = SCRIPT_VERSION):
    env = stage_env(tmp_path, "stage-in", remote, METALLO_COMMIT=commit, METALLO_BRANCH="main")
    return run_script(scripts_for(version)["stage-in"], env, tmp_path)


#: sha256 of version 2's texts as they landed (2026-11-30); frozen from then on.
VERSION_2 = {
    "stage-in": "0421cbc5f3e5385e64ba8fbe3ee73ed2f409a3870c9187cfffc8dcc4fff27aff",
    "compute": "91bf7361bcaacfe3dec842363d19840e2cd3b99dcb3a8a43c111ca75170cb94e",
    "stage-out": "752e752a27c222baca3538678629ecfcc7b8d58a8e4ae163a510454b3cf3d593",
}


#: sha256 of version 3's texts as they landed; frozen from then on.
VERSION_3 = {
    "stage-in": "0cb67d46a4880e038fdf0182d885825bf3105bb238f81956445efb5a6526afec",
    "compute": "46386184b1a9da2d69a2981da3abb966a24af9167af6fae427cef7ce449353a8",
    "stage-out": "16404aff0d173eb02633745f652dada40e92bb5741def2bc0f5d5f1f11658968",
}


#: sha256 of version 4's texts as they landed; frozen from then on.
VERSION_4 = {
    "stage-in": "4468f5f446cfaa822abf8aaf4f0fc21605899e586a73d6b1b6ae1aadbf161198",
    "compute": "d10995b19669aafc360d1f191f1f299c31fc329b0233f64c7e5b9256c160fdd6",
    "stage-out": "9f9d0167d1c0f92aba52691a7e6d0e73dacf896fea3865cf672b4c3dff0429e8",
}


#: sha256 of version 5's texts as they landed; frozen from then on.
VERSION_5 = {
    "stage-in": "4794cc189da77210a9e2a21bca4b059c9f06b68f6af71b3af47e4a740124a756",
    "compute": "e1c3d006f213cc8885576f2f89a59ca9025ba45cd2497b730b98620e079d6e0a",
    "stage-out": "d0dd2bec28273ae8b05fc1f59d37d799fd90f010686d9bc597d07a407fd11184",
}


def test_versions_are_frozen_and_new_attempts_get_version_5():
    # An Attempt re-renders the text of its recorded version byte for byte (seed 000,
    # Recovery): a change to a script is a new version, never an edit of one.
    for version, pinned in ((1, VERSION_1), (2, VERSION_2), (3, VERSION_3), (4, VERSION_4),
                            (5, VERSION_5)):
        assert {
            stage: hashlib.sha256(text.encode()).hexdigest()
            for stage, text in SCRIPTS_BY_VERSION[version].items()
        } == pinned, f"version {version} changed"
    assert SCRIPT_VERSION == 5
    for version in (2, 3, 4, 5):
        assert f"script version {version}." in scripts_for(version)["compute"].splitlines()[1]
    # Version 3 changed stage-out only: the rest is version 2's below the first line.
    for stage in ("stage-in", "compute"):
        assert scripts_for(3)[stage].splitlines()[2:] == scripts_for(2)[stage].splitlines()[2:]
    # Version 4 changed compute only: each command runs as a job step (srun).
    for stage in ("stage-in", "stage-out"):
        assert scripts_for(4)[stage].splitlines()[2:] == scripts_for(3)[stage].splitlines()[2:]
    assert scripts_for(4)["compute"].count("srun --quiet --ntasks=1 -- ") == 2
    # Version 5 changed compute only: each step appends to the log itself, and a death
    # by a signal is named.
    for stage in ("stage-in", "stage-out"):
        assert scripts_for(5)[stage].splitlines()[2:] == scripts_for(4)[stage].splitlines()[2:]
    assert scripts_for(5)["compute"].count('exec >>"$0" 2>&1') == 2
    assert "was killed by signal $signal (SIG$name)" in scripts_for(5)["compute"]
    with pytest.raises(UnknownScriptVersion, match="version 6"):
        scripts_for(6)


def test_stage_in_pulls_lfs_objects_only_when_a_file_needs_them(tmp_path):
    calls = recording_git_lfs(tmp_path)
    remote, commit = repository(tmp_path)
    done = stage_in(tmp_path, remote, commit)
    assert done.returncode == 0, done.stdout + done.stderr
    invoked = calls.read_text().splitlines()
    assert "install --local" in invoked and not any(c.startswith("pull") for c in invoked)


def test_stage_in_smudges_lfs_files(tmp_path):
    calls = recording_git_lfs(tmp_path)
    remote, commit = repository(tmp_path, lfs=True)
    done = stage_in(tmp_path, remote, commit)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pull" in calls.read_text().splitlines()
    assert (tmp_path / "ws" / "repo" / "model.bin").read_bytes() == b"weights" * 1000


def commit_elsewhere(tmp_path: Path, remote: Path, ref: str) -> str:
    """Another Run's commit on top of ``remote``'s main, pushed to ``ref``; its id."""
    other = tmp_path / "other"
    sh("git", "clone", "-q", "-b", "main", f"file://{remote}", str(other), cwd=tmp_path)
    (other / "theirs.txt").write_text("x\n")
    sh("git", "add", "-A", cwd=other)
    sh("git", "commit", "-qm", "theirs", cwd=other)
    sh("git", "push", "-q", "origin", f"HEAD:{ref}", cwd=other)
    return sh("git", "rev-parse", "HEAD", cwd=other)


def move_main(tmp_path: Path, remote: Path) -> str:
    """Another Run pushes a commit to ``remote``'s main meanwhile; its new head."""
    return commit_elsewhere(tmp_path, remote, "refs/heads/main")


def checked_out_with_change(tmp_path: Path) -> tuple[Path, Path]:
    remote, commit = repository(tmp_path)
    recording_git_lfs(tmp_path)
    assert stage_in(tmp_path, remote, commit).returncode == 0
    (tmp_path / "ws" / "repo" / "metrics.txt").write_text("0.9\n")
    return remote, tmp_path / "ws"


@pytest.mark.parametrize("version", [2, 3])
def test_stage_out_tries_a_failed_push_again(tmp_path, version):
    remote, _ = checked_out_with_change(tmp_path)
    away = remote.with_name("away.git")
    remote.rename(away)  # the Git server is gone for a moment…
    back = threading.Timer(1.5, away.rename, args=(remote,))  # …and back
    back.start()
    env = stage_env(tmp_path, "stage-out", remote, METALLO_PUSH_RETRY_SECONDS="1 1 1 1")
    try:
        done = run_script(scripts_for(version)["stage-out"], env, tmp_path)
    finally:
        back.join()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trying again in 1 s" in done.stdout
    pushed = [
        line.split("=", 1)[1]
        for line in done.stdout.splitlines()
        if line.startswith("metallo-output-commit=")
    ]
    assert pushed == [sh("git", "rev-parse", "refs/heads/main", cwd=remote)]
    assert "prt_secret" not in done.stdout + done.stderr


@pytest.mark.parametrize("version", [2, 3])
def test_stage_out_gives_up_after_the_last_try(tmp_path, version):
    remote, _ = checked_out_with_change(tmp_path)
    remote.rename(remote.with_name("away.git"))
    env = stage_env(tmp_path, "stage-out", remote, METALLO_PUSH_RETRY_SECONDS="1 1")
    done = run_script(scripts_for(version)["stage-out"], env, tmp_path)
    assert done.returncode == 87
    assert done.stdout.count("trying again") == 2 and "push failed\n" in done.stdout


def test_stage_out_stops_at_once_when_the_push_is_refused_for_good(tmp_path):
    remote, _ = checked_out_with_change(tmp_path)
    move_main(tmp_path, remote)  # the push is not a fast-forward now
    env = stage_env(tmp_path, "stage-out", remote, METALLO_PUSH_RETRY_SECONDS="30")
    started = time.monotonic()
    done = run_script(scripts_for(2)["stage-out"], env, tmp_path)
    assert done.returncode == 87 and "push refused" in done.stdout
    assert "trying again" not in done.stdout and time.monotonic() - started < 25
    assert "rebasing" not in done.stdout  # version 2 stays as it was


def test_version_3_stops_at_once_when_the_server_refuses_the_push(tmp_path):
    """A refusal that is not the branch moving on ([remote rejected]: here a hook)."""
    remote, _ = checked_out_with_change(tmp_path)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected branch' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = sh("git", "rev-parse", "refs/heads/main", cwd=remote)
    env = stage_env(tmp_path, "stage-out", remote, METALLO_PUSH_RETRY_SECONDS="30")
    started = time.monotonic()
    done = run_script(scripts_for(3)["stage-out"], env, tmp_path)
    assert done.returncode == 87 and "[remote rejected]" in done.stdout
    assert "push refused" in done.stdout and time.monotonic() - started < 25
    assert "trying again" not in done.stdout and "rebasing" not in done.stdout
    assert sh("git", "rev-parse", "refs/heads/main", cwd=remote) == before


@pytest.mark.parametrize("version", [2, 3])
def test_scancel_during_the_wait_ends_stage_out_at_once(tmp_path, version):
    remote, _ = checked_out_with_change(tmp_path)
    remote.rename(remote.with_name("away.git"))
    env = stage_env(tmp_path, "stage-out", remote, METALLO_PUSH_RETRY_SECONDS="61")
    job = subprocess.Popen(
        ["bash", "-c", scripts_for(version)["stage-out"]],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    out = ""
    deadline = time.monotonic() + 30
    while "trying again" not in out and time.monotonic() < deadline:
        out += job.stdout.readline()
    assert "trying again in 61 s" in out
    job.send_signal(signal.SIGTERM)  # what slurmstepd sends on scancel
    started = time.monotonic()
    rest, _ = job.communicate(timeout=20)
    assert job.returncode == 143 and time.monotonic() - started < 10
    assert "stopped by SIGTERM" in rest and "exit status 143" in rest
    # The trap stopped the background sleep too (it held the job's output open).
    time.sleep(0.2)
    assert subprocess.run(["pgrep", "-x", "-f", "sleep 61"]).returncode == 1


@pytest.mark.parametrize("version", [2, 3])
def test_stage_out_with_nothing_changed_pushes_nothing(tmp_path, version):
    remote, commit = repository(tmp_path)
    recording_git_lfs(tmp_path)
    assert stage_in(tmp_path, remote, commit).returncode == 0
    # Another Run moved main meanwhile: pushing the input commit again would be refused.
    moved = move_main(tmp_path, remote)
    env = stage_env(tmp_path, "stage-out", remote)
    done = run_script(scripts_for(version)["stage-out"], env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing pushed" in done.stdout and "metallo-output-commit=" not in done.stdout
    assert sh("git", "rev-parse", "refs/heads/main", cwd=remote) == moved
    # Version 1 pushed the input commit again, and failed here.
    assert run_script(scripts_for(1)["stage-out"], env, tmp_path).returncode == 87


@pytest.mark.parametrize("version", [2, 3])
def test_stage_out_pushes_a_commit_compute_made_itself(tmp_path, version):
    """A reviewer's case: compute committed its outputs, leaving a clean tree."""
    remote, commit = repository(tmp_path)
    recording_git_lfs(tmp_path)
    assert stage_in(tmp_path, remote, commit).returncode == 0
    repo = tmp_path / "ws" / "repo"
    (repo / "metrics.json").write_text("{}\n")
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-qm", "metrics", cwd=repo)
    env = stage_env(tmp_path, "stage-out", remote)
    done = run_script(scripts_for(version)["stage-out"], env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    head = sh("git", "rev-parse", "HEAD", cwd=repo)
    assert f"metallo-output-commit={head}" in done.stdout
    assert sh("git", "rev-parse", "refs/heads/main", cwd=remote) == head


def test_the_exit_summary_starts_on_a_line_of_its_own(tmp_path):
    """A new user saw "no-newline-at-end2026-…Z metallo compute: exit status 0"."""
    (tmp_path / "ws" / "repo").mkdir(parents=True)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(tmp_path / "ws"),
        "METALLO_STAGE": "compute", "METALLO_WORKSPACE": str(tmp_path / "ws"),
        "METALLO_WORKDIR": ".", "METALLO_CMD_COUNT": "1",
        "METALLO_CMD_0_SHELL": "printf 'no-newline-at-end'",
    }
    log = tmp_path / "compute.log"
    for version in (1, 2):
        with log.open("wb") as out:  # the job's output file, as slurmstepd opens it
            done = subprocess.run(["bash", "-c", scripts_for(version)["compute"]], env=env,
                                  cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, timeout=60)
        assert done.returncode == 0
        lines = log.read_text().splitlines()
        if version == 2:
            assert "no-newline-at-end" in lines and lines[-1].endswith("exit status 0")
        else:  # version 1 stays as it was
            assert lines[-1].startswith("no-newline-at-end") and lines[-1].endswith("status 0")


# Version 3: several Runs of one branch at once (a new user's report: of ten, nine lost
# their outputs to a non-fast-forward refusal).


def checkout(tmp_path: Path, remote: Path, name: str) -> Path:
    """A Run's stage-in of the input commit into workspace ``name``; its checkout."""
    env = stage_env(
        tmp_path,
        "stage-in",
        remote,
        METALLO_BRANCH="main",
        METALLO_WORKSPACE=str(tmp_path / name),
        HOME=str(tmp_path / name),
    )
    done = run_script(scripts_for(SCRIPT_VERSION)["stage-in"], env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / name / "repo"


def stage_out(tmp_path: Path, remote: Path, name: str, version: int = 3, **extra: str):
    env = stage_env(
        tmp_path,
        "stage-out",
        remote,
        METALLO_WORKSPACE=str(tmp_path / name),
        HOME=str(tmp_path / name),
        **extra,
    )
    return run_script(scripts_for(version)["stage-out"], env, tmp_path)


def reported(done) -> str:
    """The output commit a stage-out printed (exactly one)."""
    (commit,) = [
        line.split("=", 1)[1]
        for line in done.stdout.splitlines()
        if line.startswith("metallo-output-commit=")
    ]
    return commit


def two_runs(tmp_path: Path, *, lfs: bool = False) -> tuple[Path, Path, Path]:
    """Two Runs of one action on main, both checked out at the same input commit."""
    remote, _ = repository(tmp_path, lfs=lfs)
    recording_git_lfs(tmp_path)
    return remote, checkout(tmp_path, remote, "run-1"), checkout(tmp_path, remote, "run-2")


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


def another_runs_commit(tmp_path: Path, remote: Path) -> str:
    """A commit another Run made on main, in ``remote`` but not yet on its main."""
    return commit_elsewhere(tmp_path, remote, "refs/heads/theirs")


def pre_receive(remote: Path, body: str) -> None:
    """A hook that moves main while a push is under way (outside the push's object
    quarantine), as another Run's push landing between the server's advertisement and
    its ref update does."""
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\nunset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY "
        "GIT_ALTERNATE_OBJECT_DIRECTORIES\n" + body
    )
    hook.chmod(0o755)


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
