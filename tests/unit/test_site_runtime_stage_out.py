"""Stage-out's "did anything change?" on a real git checkout (local executor,
docs/site-runtime.md): a clean status pushes nothing, and so does a status whose
entries stage nothing new: a file the compute step added to the index and then
deleted, or a tracked file it removed from the index only."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from site_runtime.adaptors.local.stage_runner import Runner

ENV = {
    "PATH": os.environ["PATH"],
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
}


def sh(cwd: Path, *argv: str) -> str:
    return subprocess.run(argv, cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout


def checkout(tmp_path: Path) -> tuple[Runner, Path, Path]:
    """A bare origin with one commit on main, a checkout of it and a stage-out Runner."""
    origin = tmp_path / "origin.git"
    sh(tmp_path, "git", "init", "-q", "--bare", "-b", "main", str(origin))
    repo = tmp_path / "repo"
    sh(tmp_path, "git", "init", "-q", "-b", "main", str(repo))
    (repo / "tracked").write_text("t\n")
    sh(repo, "git", "add", "tracked")
    sh(repo, "git", "commit", "-q", "-m", "seed")
    sh(repo, "git", "remote", "add", "origin", str(origin))
    sh(repo, "git", "push", "-q", "origin", "main")
    control = tmp_path / "control"
    control.mkdir()
    spec = {
        "stage": "stage-out",
        "repo_dir": str(repo),
        "log_file": str(tmp_path / "stage-out.log"),
        "repository": {"url": str(origin), "commit": sh(repo, "git", "rev-parse", "HEAD").strip(),
                       "branch": "main"},
        "author": {"name": "Metallo", "email": "metallo@localhost"},
        "message": "outputs",
        "grace_seconds": 1,
        "wall_time_seconds": 60,
    }
    runner = Runner(control, spec, credentials={})
    runner.deadline = None
    return runner, repo, origin


@pytest.mark.parametrize(
    "compute",
    [
        [],  # clean: one git status, nothing else
        [("write", "tmp"), ("git", "add", "tmp"), ("rm", "tmp")],  # status: "AD tmp"
        [("git", "rm", "-q", "--cached", "tracked")],  # status: "D tracked" and "?? tracked"
    ],
)
def test_nothing_staged_means_nothing_pushed(tmp_path, compute):
    runner, repo, origin = checkout(tmp_path)
    before = sh(origin, "git", "rev-parse", "main")
    for step in compute:
        if step[0] == "write":
            (repo / step[1]).write_text("x\n")
        elif step[0] == "rm":
            (repo / step[1]).unlink()
        else:
            sh(repo, *step)
    assert runner.stage_out() == {"exit_code": 0, "output_commit": None}
    assert sh(origin, "git", "rev-parse", "main") == before


def test_a_change_is_committed_and_pushed(tmp_path):
    runner, repo, origin = checkout(tmp_path)
    (repo / "result.txt").write_text("42\n")
    outcome = runner.stage_out()
    assert outcome["exit_code"] == 0 and outcome["output_commit"]
    assert sh(origin, "git", "rev-parse", "main").strip() == outcome["output_commit"]
    assert sh(origin, "git", "show", "main:result.txt") == "42\n"


def test_a_commit_compute_made_itself_is_pushed(tmp_path):
    """A reviewer's case: compute committed its outputs and left a clean tree; stage-out
    said "no changes" and the commit never reached the repository."""
    runner, repo, origin = checkout(tmp_path)
    (repo / "metrics.json").write_text("{}\n")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-q", "-m", "metrics")
    head = sh(repo, "git", "rev-parse", "HEAD").strip()
    assert runner.repo.head_commit() == head  # read from .git, no process
    outcome = runner.stage_out()
    assert outcome == {"exit_code": 0, "output_commit": head}
    assert sh(origin, "git", "rev-parse", "main").strip() == head
