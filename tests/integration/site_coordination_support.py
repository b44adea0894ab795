"""Shared pieces of the Site Coordination integration tests: a real migrated
database, a real uvicorn Site edge over TLS on an ephemeral port, grants and
appended commands (through the real outbox)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from metallo.common.v1 import common_pb2
from metallo.dev_certificates import make_dev_certificates
from metallo.identity.issuer import LabIssuer, generate_key
from metallo.messaging import Topology
from metallo.persistence.engine import session_factory
from metallo.site_coordination.v1 import site_coordination_pb2 as sc_pb2
from site_coordination.adaptors.edge.app import EdgeSettings
from site_coordination.adaptors.edge.server import ServeOptions, build_server
from site_coordination.adaptors.governance_authority import GovernanceAuthority
from site_coordination.adaptors.lab_git.app import LabGitSettings
from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.adaptors.tables import command_grants
from site_coordination.adaptors.wiring import build_edge, edge_engine
from site_coordination.application.grants import create_command_grant
from site_coordination.application.streams import append_command
from site_coordination.domain.canonical import canonical_json

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "services" / "site_coordination" / "migrations"
OPERATOR_TOKEN = "operator-" + uuid.uuid4().hex


@dataclass
class EdgeHarness:
    """A running edge and what tests need around it."""

    url: str
    database_url: str
    engine: AsyncEngine
    ca_file: Path
    governance_file: Path
    git_root: Path
    issuer: LabIssuer
    topology: Topology
    tmp: Path
    settings: EdgeSettings
    _server: Any = None
    _task: asyncio.Task | None = None
    _clients: list[httpx.AsyncClient] = field(default_factory=list)

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def client(self, secret: str | None = None, **kwargs) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        client = httpx.AsyncClient(base_url=self.url, verify=self.ssl_context(), headers=headers,
                                   timeout=40, **kwargs)
        self._clients.append(client)
        return client

    async def start(self) -> None:
        app = build_edge(
            self.engine, self.database_url, self.topology,
            authority=GovernanceAuthority(self.governance_file), issuer=self.issuer,
            settings=self.settings,
            lab_git=LabGitSettings(root=self.git_root, operator_token=OPERATOR_TOKEN),
            draining=lambda: self._server is not None and self._server.should_exit,
        )
        port = int(self.url.rsplit(":", 1)[1]) if self.url else 0
        server, sock = build_server(app, ServeOptions(
            host="127.0.0.1", port=port, cert_file=self.tmp / "certs" / "server.pem",
            key_file=self.tmp / "certs" / "server-key.pem"))
        self.url = f"https://127.0.0.1:{sock.getsockname()[1]}"
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]))
        for _ in range(200):
            if server.started:
                return
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.02)
        raise RuntimeError("the edge did not start")

    async def stop(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()
        if self._server is not None:
            self._server.should_exit = True
            await self._task
            self._server = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def transaction(self):
        sessions = session_factory(self.engine)
        from contextlib import asynccontextmanager

        @asynccontextmanager
        async def tx():
            async with sessions.begin() as session:
                yield PostgresSiteStore(session)

        return tx

    async def grant(self, site: str = "lab-slurm", environment: str = "slurm",
                    seconds: int = 3600) -> str:
        issued = await create_command_grant(self.transaction(), site, environment, seconds, "test")
        return issued.secret

    async def expire_grants(self) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(command_grants).values(
                expires_at=datetime.now(UTC) - timedelta(seconds=1)))

    async def append(self, kind: str, *, site: str = "lab-slurm", environment: str = "slurm",
                     run_id: str = "run-1", attempt_id: str = "att-1",
                     payload: dict[str, Any] | None = None, command_id: str | None = None) -> int:
        cmd = sc_pb2.AppendSiteCommand(
            metadata=common_pb2.CommandMetadata(command_id=command_id or uuid.uuid4().hex,
                                                acting_member="m-alice", project="demo"),
            site_id=site, environment=environment, kind=kind, run_id=run_id,
            attempt_id=attempt_id, attempt_number=1, payload_json=canonical_json(payload or {}),
        )
        sessions = session_factory(self.engine)
        async with sessions.begin() as session:
            stored = await append_command(PostgresSiteStore(session), cmd)
        return stored.sequence


def prepare_payload(repository_url: str = "https://127.0.0.1:1/git/demo.git",
                    deadline: datetime | None = None, member: dict | None = None) -> dict[str, Any]:
    """A ``prepare`` payload as Execution Core writes it (docs/site-commands.md)."""
    return {
        "project": "demo", "workload_id": "w-1", "revision": 1, "action": "train",
        "action_type": "slurm-job", "family": "queued-batch", "service_kind": None,
        "spec": {"command": ["python", "train.py"]},
        "material_digest": "d" * 64,
        "repository": {"url": repository_url, "commit": "0" * 40, "branch": "main"},
        "member": member or {"id": "m-alice", "site_username": "alice", "account": "demo"},
        # A fixed far deadline by default keeps payloads byte-identical between calls.
        "deadline": (deadline or datetime(2099, 1, 1, tzinfo=UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def result_for(command: dict[str, Any], phase: str = "prepared", outcome: str = "succeeded"
               ) -> dict[str, Any]:
    """A result the Runtime would record for ``command``."""
    return {
        "command_id": command["command_id"], "outcome": outcome, "code": None, "message": None,
        "native_jobs": [],
        "observation": {"phase": phase, "native_state": None, "exit_code": None, "signal": None,
                        "failure": None, "output_commit": None, "endpoint": None,
                        "observed_at": "2026-11-29T11:02:03Z"},
    }


async def start_harness(make_database, tmp_path: Path, namespace: str,
                        settings: EdgeSettings | None = None) -> EdgeHarness:
    """Migrate a throw-away database, make certificates, copy the governance file, start."""
    url = await make_database("site_coordination", MIGRATIONS)
    make_dev_certificates(tmp_path / "certs")
    governance = tmp_path / "governance.yaml"
    shutil.copy(ROOT / "examples" / "governance.yaml", governance)
    git_root = tmp_path / "repos"
    git_root.mkdir()
    issuer = LabIssuer(generate_key(tmp_path / "issuer"), issuer="https://issuer.test",
                       azp="metallo-site-runtime")
    harness = EdgeHarness(
        url="", database_url=url, engine=edge_engine(url, pool_size=5), ca_file=tmp_path / "certs" / "ca.pem",
        governance_file=governance, git_root=git_root, issuer=issuer,
        topology=Topology(prefix=namespace), tmp=tmp_path, settings=settings or EdgeSettings(),
    )
    await harness.start()
    return harness
