"""Real git repositories for the Workload Portfolio tests (made with the git command)."""

from __future__ import annotations

import subprocess
from pathlib import Path

_ENV = {
    "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.org",
    "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.org",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin",
}


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; return stdout stripped."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=_ENV).stdout.strip()


def make_repo(path: Path, files: dict[str, str], *, branch: str = "main") -> str:
    """Create a repository at ``path`` with one commit of ``files``; return the commit."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", branch, str(path)], check=True, env=_ENV)
    return commit(path, files, "initial")


def commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    """Write ``files`` (path → text) and commit them on the current branch; return the commit."""
    for name, text in files.items():
        f = repo / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
        git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


ACTIONS = """\
version: 1
actions:
  train:
    type: slurm-job
    command: [python, train.py, --epochs, "3"]
    resources: {cpus: 2, memoryMiB: 2048, wallTimeSeconds: 600}
  evaluate:
    type: k8s-job
    command: {shell: "python eval.py > results.txt"}
  app:
    type: k8s-deployment
    command: [python, -m, http.server, "8080"]
    service: {port: 8080}
  serve:
    type: k8s-inferenceservice
    model: {name: tiny, path: models/tiny}
"""
