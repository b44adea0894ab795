"""Shared pieces of the Site Runtime integration tests: the real Site edge (the Site
Coordination helper's app over TLS with its lab Git server, real PostgreSQL), a
real Git repository seeded through it, and a Runtime built from the real worker,
journals, HTTPS edge client and local executor."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from site_coordination.adaptors.tables import repository_grants, site_commands
from site_runtime.adaptors.delivery_journal import SqliteDeliveryJournal
from site_runtime.adaptors.edge.client import EdgeClient, EdgeSettings
from site_runtime.adaptors.local.executor import LocalExecutor, LocalSettings
from site_runtime.adaptors.local.jobs import LocalJobsJournal
from site_runtime.adaptors.local.processes import live_group_members
from site_runtime.application.worker import Worker, WorkerSettings
from tests.integration.site_coordination_support import OPERATOR_TOKEN

ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$LAB_GIT_USER" ;;
  *) printf '%s\\n' "$LAB_GIT_PASS" ;;
esac
"""

MAKE_OUTPUT = """import os, sys
with open("output.txt", "w") as f:
    f.write("args=" + repr(sys.argv[1:]) + "\\n")
    f.write("GREETING=" + os.environ.get("GREETING", "") + "\\n")
    f.write("HAS_TOKEN=" + str(any("TOKEN" in k for k in os.environ)) + "\\n")
print("compute ran")
"""


class Crash(BaseException):
    """Stands for a kill of the Runtime at a fault point (not caught by the worker)."""


async def git(*args: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode, out.decode(errors="replace")


async def seed_repository(edge, tmp: Path, name: str = "demo.git") -> tuple[str, str]:
    """Create ``name`` on the lab Git server with one commit; return (url, commit)."""
    client = edge.client()
    r = await client.put(f"/git-admin/repositories/{name}", auth=("operator", OPERATOR_TOKEN))
    assert r.status_code == 201, r.text
    askpass = tmp / "seed-askpass.sh"
    askpass.write_text(ASKPASS)
    askpass.chmod(askpass.stat().st_mode | stat.S_IXUSR)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": str(askpass),
        "GIT_SSL_CAINFO": str(edge.ca_file),
        "LAB_GIT_USER": "operator",
        "LAB_GIT_PASS": OPERATOR_TOKEN,
        "GIT_AUTHOR_NAME": "seed",
        "GIT_AUTHOR_EMAIL": "seed@example.org",
        "GIT_COMMITTER_NAME": "seed",
        "GIT_COMMITTER_EMAIL": "seed@example.org",
    }
    work = tmp / f"seed-{name}"
    assert (await git("init", "-q", "-b", "main", str(work), cwd=tmp, env=env))[0] == 0
    (work / "make_output.py").write_text(MAKE_OUTPUT)
    (work / "README").write_text("demo\n")
    assert (await git("add", "-A", cwd=work, env=env))[0] == 0
    assert (await git("commit", "-q", "-m", "seed", cwd=work, env=env))[0] == 0
    url = f"{edge.url}/git/{name}"
    code, out = await git("push", "-q", url, "main", cwd=work, env=env)
    assert code == 0, out
    code, commit = await git("rev-parse", "HEAD", cwd=work, env=env)
    return url, commit.strip()


def batch_payload(
    url: str,
    commit: str,
    command: Any,
    *,
    wall: int = 600,
    environment: dict[str, str] | None = None,
    pre: list[Any] | None = None,
) -> dict[str, Any]:
    """A ``prepare`` payload for the local executor with the spec shape of docs/actions.md."""
    deadline = datetime.now(UTC) + timedelta(hours=2)
    payload: dict[str, Any] = {
        "project": "demo",
        "workload_id": "w-1",
        "revision": 1,
        "action": "train",
        "action_type": "slurm-job",
        "family": "queued-batch",
        "service_kind": None,
        "material_digest": "d" * 64,
        "repository": {"url": url, "commit": commit, "branch": "main"},
        "member": {"id": "m-alice", "site_username": "alice", "account": "demo"},
        "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    payload["spec"] = {
        "specVersion": 1,
        "action": "train",
        "actionType": "slurm-job",
        "command": command,
        "preCommands": pre or [],
        "resources": {"cpus": 1, "memoryMiB": 1024, "gpus": 0, "wallTimeSeconds": wall, "nodes": 1},
        "runtime": {"environment": environment or {}, "workingDirectory": "."},
        "inputs": [],
    }
    return payload


@dataclass
class Runtime:
    """One Site Runtime instance over the state directory ``state`` (restartable)."""

    edge: Any
    state: Path
    grant_file: Path
    fault: Any = None
    max_active: int = 4
    grace_seconds: float = 1.0
    poll_seconds: float = 0.1
    on_native_end: Any = None  # the executor's native-end callback (ADR 0016); None: none
    notice_timeout_seconds: float = 5.0
    client: EdgeClient = field(init=False)
    delivery: SqliteDeliveryJournal = field(init=False)
    jobs: LocalJobsJournal = field(init=False)
    executor: LocalExecutor = field(init=False)
    worker: Worker = field(init=False)

    def __post_init__(self) -> None:
        self.client = EdgeClient(
            EdgeSettings(
                base_url=self.edge.url, ca_file=self.edge.ca_file, credential_file=self.grant_file
            )
        )
        self.delivery = SqliteDeliveryJournal(self.state / "delivery.sqlite")
        self.jobs = LocalJobsJournal(self.state / "jobs.sqlite")
        self.executor = LocalExecutor(
            LocalSettings(
                workspace_root=self.state / "workspaces",
                grace_seconds=self.grace_seconds,
                max_active=self.max_active,
                repository_ca_file=self.edge.ca_file,
                poll_seconds=self.poll_seconds,
                # No supervision pass runs here: releases go with the observe that ends
                # a stage (production batches them for a second, RUNTIME_LOCAL_RELEASE_SECONDS).
                release_delay_seconds=0.0,
                notice_timeout_seconds=self.notice_timeout_seconds,
            ),
            self.jobs,
            authority=self.client,
            grants=self.client,
            on_native_end=self.on_native_end,
        )
        self.worker = Worker(
            self.client,
            self.delivery,
            self.executor,
            WorkerSettings(
                wait_seconds=0.2,
                deferral_backoff_initial=0.05,
                deferral_backoff_maximum=0.2,
                edge_backoff_initial=0.05,
                edge_backoff_maximum=0.5,
            ),
            fault=self.fault or (lambda step: None),
        )

    async def close(self) -> None:
        await self.executor.stop_supervision()
        self.executor.close()
        await self.client.close()
        self.delivery.close()
        self.jobs.close()

    async def handle(self, sequence: int, *, attempts: int = 50) -> dict[str, Any]:
        """Step the worker (and the executor) until ``sequence`` is acknowledged; return
        its recorded result."""
        for _ in range(attempts):
            await self.worker.step()
            await self.executor.tick()
            entry = self.delivery.entry(sequence)
            if entry is not None and entry.state == "acknowledged":
                return json.loads(entry.result_json)
            await asyncio.sleep(0.05)
        raise AssertionError(f"command {sequence} was not acknowledged")


async def new_runtime(edge, tmp: Path, **kwargs: Any) -> Runtime:
    """A Runtime with its own grant file (mode 0600) for the lab-slurm stream."""
    grant_file = tmp / "grant"
    if not grant_file.exists():
        secret = await edge.grant()
        grant_file.write_text(secret + "\n")
        grant_file.chmod(0o600)
    return Runtime(edge, tmp / "state", grant_file, **kwargs)


async def observe_until(
    runtime: Runtime, edge, attempt_id: str, phases: set[str], timeout: float = 60.0
) -> dict[str, Any]:
    """Append ``observe`` commands until the observation's phase is in ``phases``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        seq = await edge.append("observe", attempt_id=attempt_id)
        result = await runtime.handle(seq)
        if result["observation"]["phase"] in phases:
            return result
        await asyncio.sleep(0.2)
    raise AssertionError(f"attempt {attempt_id} never reached {phases}")


async def edge_result(edge, sequence: int) -> dict[str, Any] | None:
    """The result the edge recorded for ``sequence`` (real PostgreSQL)."""
    async with edge.engine.connect() as conn:
        raw = (
            await conn.execute(
                select(site_commands.c.result_json).where(site_commands.c.sequence == sequence)
            )
        ).scalar_one()
    return json.loads(raw) if raw else None


async def released_grants(edge, *, seconds: float = 10.0) -> list:
    """The edge's repository grants (grant_id, direction, revoked_at) once every one is
    revoked — the local executor releases within ``release_delay_seconds``, in one
    request with the others — or as they are after ``seconds``."""
    for _ in range(int(seconds / 0.05)):
        async with edge.engine.connect() as conn:
            rows = (await conn.execute(select(
                repository_grants.c.grant_id, repository_grants.c.direction,
                repository_grants.c.revoked_at))).all()
        if rows and all(r.revoked_at is not None for r in rows):
            break
        await asyncio.sleep(0.05)
    return rows


def stage_rows(state: Path, attempt_id: str) -> dict[str, sqlite3.Row]:
    """The local executor's stage rows of an Attempt, read straight from jobs.sqlite."""
    conn = sqlite3.connect(state / "jobs.sqlite")
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute("SELECT * FROM stages WHERE attempt_id = ?", (attempt_id,)).fetchall()
    finally:
        conn.close()
    return {r["stage"]: r for r in rows}


def bare_git(edge, *args: str, name: str = "demo.git") -> str:
    """Output of ``git --git-dir <bare repository> ARGS`` on the lab Git server's disk."""
    return subprocess.run(
        ["git", "--git-dir", str(edge.git_root / name), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def bare_head(edge, name: str = "demo.git", branch: str = "main") -> str:
    """The commit ``branch`` points to in the bare repository."""
    return bare_git(edge, "rev-parse", branch, name=name).strip()


async def group_gone(pgid: int, timeout: float = 5.0) -> bool:
    """Wait until no live process is left in group ``pgid``."""
    for _ in range(int(timeout / 0.05)):
        if not live_group_members(pgid):
            return True
        await asyncio.sleep(0.05)
    return False
