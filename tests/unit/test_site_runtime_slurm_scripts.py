"""The staged Slurm Attempt's bash scripts, run with bash on real git repositories
(outside Slurm: the script is the same text the job runs; tests/slurm run it in jobs):
frozen versions, stage-in's LFS, stage-out's push retries. Version 3's rebase onto a
branch that moved on: test_site_runtime_slurm_scripts_rebase.py.

Version 2 (seed 000, Staged Slurm batch execution, with the local executor's push
retry): stage-out tries a failed push again unless git refused it for good, and a
scancel ends its wait at once; stage-in pulls LFS objects only when a file needs them.
Version 1 stays byte for byte what it was, for Attempts prepared with it.

Version 3 (so that ten Runs of one branch at once all keep their outputs despite
non-fast-forward refusals): when the branch moved on, stage-out fetches it,
rebases this Run's commits onto it and pushes again, at most 5 times; a conflict pushes
nothing. Version 2 stays as it was (refused at once).
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import threading
import time

import pytest

from site_runtime.adaptors.slurm.scripts import (
    SCRIPT_VERSION,
    SCRIPTS_BY_VERSION,
    UnknownScriptVersion,
    scripts_for,
)
from tests.unit.slurm_scripts_support import (
    checked_out_with_change,
    move_main,
    recording_git_lfs,
    repository,
    run_script,
    sh,
    stage_env,
    stage_in,
)

#: sha256 of version 1's texts as Attempts prepared before version 2 recorded them.
VERSION_1 = {
    "stage-in": "b26d63f0d86d8fc501ac1e7db2c82fced19fc15d174be50b73eb4ebc00a0d258",
    "compute": "87e24d7ae6b96dcac2b3d73dceebea7136a65e93376463034b7f62740f8ff74a",
    "stage-out": "10d0a0865c753dae4d5b0aca3f03bf41c3bf0ee9c93a396727e77137ceeef226",
}


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
