"""End-to-end fixtures (marker ``e2e``): the real dev stack (``metallo dev up``),
the real ``metallo`` entry point as a subprocess, repositories on the lab Git
server. Nothing is stubbed. A stack already running with the wanted executor is
reused; a stack this session started is stopped at the end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METALLO = [sys.executable, "-m", "metallo.cli"]
# The tests act in their own Project (examples/governance.yaml, `e2e`): the dev stack's
# databases are the machine's, and a member's `metallo run list` in `demo` must show
# only their own work, not the suite's.
PROJECT = "e2e"
# The session's own login (`metallo dev login`), never the developer's.
CREDENTIALS = Path(tempfile.mkdtemp(prefix="metallo-e2e-")) / "credentials.json"
ENV = {**os.environ, "METALLO_MEMBER": "m-alice", "METALLO_PROJECT": PROJECT,
       "METALLO_TOPOLOGY_PREFIX": "", "COLUMNS": "200",
       "METALLO_CREDENTIALS_FILE": str(CREDENTIALS)}


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


def metallo(*args: str, timeout: float = 600) -> Done:
    """Run the metallo CLI; its exit code and output."""
    done = subprocess.run([*METALLO, *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return Done(done.returncode, done.stdout, done.stderr)


def stack_state() -> dict | None:
    done = metallo("dev", "status", "--output", "json", timeout=60)
    return done.json() if done.code == 0 else None


@pytest.fixture(scope="session")
def _stack_owner():
    """Stops, at the end of the session, a stack this session started."""
    started: list[bool] = []
    yield started
    if started:
        metallo("dev", "down", timeout=180)


@pytest.fixture(scope="module")
def local_stack(_stack_owner):
    """The dev stack with the local executor, running for each module that needs it: a
    test that switches executor (the Slurm demo) stops the local stack, so every module
    checks again and starts it when it is not running."""
    state = stack_state()
    if state is not None and state["executor"] != "local":
        metallo("dev", "down", timeout=180)
        state = None
    if state is None:
        up = metallo("dev", "up", "--executor", "local", timeout=400)
        if up.code != 0:
            pytest.fail(f"metallo dev up failed:\n{up.stderr[-3000:]}")
        _stack_owner.append(True)
    login = metallo("dev", "login", "m-alice", timeout=60)
    if login.code != 0:
        pytest.fail(f"metallo dev login failed:\n{login.stderr[-3000:]}")
    return stack_state()


def publish(source: Path, prefix: str) -> str:
    """Publish ``source`` under a unique name; the repository URL."""
    done = metallo("dev", "publish", str(source), "--name", f"{prefix}-{uuid.uuid4().hex[:8]}",
                   "--output", "json", timeout=120)
    assert done.code == 0, done.stderr
    return done.json()["repository_url"]


@pytest.fixture
def scratch_repo(tmp_path):
    """Factory: a directory holding ``actions.yaml`` text plus extra files."""
    def make(actions: str, **files: str) -> Path:
        repo = tmp_path / "repo"
        if repo.exists():
            shutil.rmtree(repo)
        repo.mkdir()
        (repo / "actions.yaml").write_text(actions)
        for name, text in files.items():
            (repo / name).write_text(text)
        return repo
    return make
