"""The git side of the Pipeline Coordination integration tests: a bare origin and a work clone."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git with fixed arguments (no shell) and return its stdout."""
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "HOME": str(cwd or "/tmp"),
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


ACTIONS = """\
version: 1
actions:
  train:
    type: slurm-job
    command: [python, train.py]
  eval:
    type: slurm-job
    command: [python, eval.py]
"""


@dataclass
class Repo:
    """A bare origin (the repository_url) and a work clone that plays the steps' pushes."""

    origin: Path
    work: Path

    @classmethod
    def create(cls, base: Path, actions_yaml: str = ACTIONS) -> Repo:
        origin, work = base / "origin.git", base / "work"
        git("init", "--bare", "-b", "main", str(origin))
        git("clone", str(origin), str(work))
        git("checkout", "-b", "main", cwd=work)
        repo = cls(origin, work)
        repo.push({"actions.yaml": actions_yaml, "README": "demo\n"}, "initial")
        return repo

    @property
    def url(self) -> str:
        return str(self.origin)

    def push(self, files: dict[str, str], message: str) -> str:
        """Commit ``files`` on main and push; return the new commit (what a stage-out does)."""
        for name, text in files.items():
            (self.work / name).write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-m", message, cwd=self.work)
        git("push", "origin", "main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def head(self) -> str:
        return git("--git-dir", str(self.origin), "rev-parse", "refs/heads/main")
