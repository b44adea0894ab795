"""Helpers of the staged Slurm script tests: real git repositories, the rendered jobs'
environment, and running a stage's script with bash (outside Slurm: the same text the job runs)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from site_runtime.adaptors.slurm.scripts import SCRIPT_VERSION, scripts_for

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
