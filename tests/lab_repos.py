"""Test repositories and prepare payloads the lab suites share (tests/slurm, tests/k8s).

A repository is a bare Git repository over ``file://`` owned by the member (alice),
whom the labs run the stages as; the checks read it with :func:`git` as the test's
user. A payload is a ``queued-batch`` prepare payload of docs/actions.md's spec
shape.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

MEMBER = {"id": "m-alice", "site_username": "alice", "account": "demo"}


def make_repository(
    files: dict[str, str] | None = None,
    lfs: dict[str, bytes] | None = None,
    *,
    root: Path,
) -> tuple[str, str, Path]:
    """A bare repository owned by alice with one commit, under ``root``; returns
    (file URL, commit, path).

    ``lfs`` files are committed under the LFS filter (``*.bin``), their objects pushed
    into the bare repository's LFS store.
    """
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    name = uuid.uuid4().hex[:12]
    bare = root / f"{name}.git"
    work = root / f"{name}.work"
    git = [
        "git",
        "-c",
        "user.name=Test",
        "-c",
        "user.email=test@localhost",
        "-c",
        "init.defaultBranch=main",
    ]
    subprocess.run([*git, "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    for path, text in (files or {"README.md": "lab\n"}).items():
        (work / path).write_text(text)
    if lfs:
        git += ["-c", "filter.lfs.clean=git-lfs clean -- %f", "-c", "filter.lfs.required=true"]
        (work / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
        for path, data in lfs.items():
            (work / path).write_bytes(data)
    subprocess.run([*git, "-C", str(work), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "initial"], check=True)
    if lfs:
        subprocess.run(
            [*git, "-C", str(work), "lfs", "push", "--all", f"file://{bare}"],
            check=True,
            capture_output=True,
        )
    subprocess.run(
        [*git, "-C", str(work), "push", "-q", "--no-verify", str(bare), "HEAD:refs/heads/main"],
        check=True,
    )
    commit = subprocess.run(
        [*git, "-C", str(work), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    shutil.rmtree(work)
    alice = pwd.getpwnam("alice")
    for root, dirs, files_ in os.walk(bare):
        for entry in [
            root,
            *(os.path.join(root, d) for d in dirs),
            *(os.path.join(root, f) for f in files_),
        ]:
            os.chown(entry, alice.pw_uid, alice.pw_gid)
    return f"file://{bare}", commit, bare


def git(*args: str) -> str:
    """``git ARGS`` as the test's user on the lab's repositories (owned by the member)."""
    return subprocess.run(
        ["git", "-c", "safe.directory=*", *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def queued_batch_payload(
    action_type: str,
    url: str,
    commit: str,
    command: Any,
    member: dict[str, str] | None = None,
    *,
    pre: list[Any] | None = None,
    environment: dict[str, str] | None = None,
    resources: dict[str, Any],
) -> dict[str, Any]:
    """A prepare payload of ``action_type`` for ``command`` (an argv list, or a command
    object) at ``commit`` of ``url``'s ``main``, for ``member`` (alice by default)."""
    spec = {
        "command": command if isinstance(command, dict) else {"argv": command},
        "preCommands": pre or [],
        "resources": resources,
        "runtime": {"environment": environment or {}, "workingDirectory": "."},
        "inputs": [],
    }
    return {
        "project": "demo",
        "family": "queued-batch",
        "action_type": action_type,
        "spec": spec,
        "material_digest": "sha256:" + uuid.uuid4().hex,
        "repository": {"url": url, "commit": commit, "branch": "main"},
        "member": dict(member or MEMBER),
        "deadline": None,
    }
