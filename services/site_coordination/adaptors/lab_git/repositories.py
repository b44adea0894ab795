"""Bare repositories of the lab Git server (operator actions)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from site_coordination.adaptors.lab_git.tokens import _REPO


def create_repository(root: Path, name: str, default_branch: str = "main") -> tuple[Path, bool]:
    """Create bare repository ``root/name`` (``name`` like ``demo.git``); return
    ``(path, created)``. Raises ValueError for an unsafe name. Runs ``git`` with an
    argument list (no shell).
    """
    if ".." in name or not _REPO.match(name):
        raise ValueError("repository names look like demo.git or group/demo.git")
    path = Path(root) / name
    if (path / "HEAD").exists():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "--bare", "--quiet", f"--initial-branch={default_branch}",
                    str(path)], check=True, capture_output=True, timeout=30)
    subprocess.run(["git", "-C", str(path), "config", "http.receivepack", "true"],
                   check=True, capture_output=True, timeout=30)
    return path, True
