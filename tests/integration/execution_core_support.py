"""Harness of the Execution Core integration tests.

Real PostgreSQL and RabbitMQ; Execution Core's real parts. Its neighbours are
replaced at the message level only (tests/integration/execution_core_doubles.py):
a Workload Portfolio answering fixed revisions, a Site Coordination whose
``script`` decides each command's result, and a listener of Execution Core's
events. :func:`stack_factory` starts them all with a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from execution_core.adaptors.governance_authority import GovernanceAuthority
from execution_core.adaptors.service import ExecutionCore
from execution_core.application.settings import Settings
from execution_core.domain.canonical import canonical_json
from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.governance import GovernanceFile
from metallo.messaging import RequestClient, Topology
from metallo.persistence.engine import create_engine
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.bus import role_url
from tests.integration.execution_core_doubles import (
    EventLog,
    PortfolioDouble,
    Script,
    SiteDouble,
    happy_batch,
    messaging_only_database,
    result,
)

# What tests import from the harness (the script helpers live with the Site double).
__all__ = ["COMMIT", "FAST", "MIGRATIONS", "ROOT", "Script", "Stack", "batch_spec", "cmd_meta", "governance_copy",
           "happy_batch", "query_meta", "result", "revision", "stack_factory"]

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "services" / "execution_core" / "migrations"
COMMIT = "1" * 40

FAST = Settings(
    observe_interval_seconds=0.2,
    result_recheck_seconds=0.5,
    stale_after_seconds=30,
    dispatch_timeout_seconds=60,
    supervisor_lease_seconds=5,
    supervisor_poll_seconds=0.05,
    launch_lease_seconds=5,
    launch_poll_seconds=0.05,
    planning_retry_seconds=0.2,
    planning_timeout_seconds=60,
    workload_query_timeout_seconds=5,
)


def batch_spec(**extra: Any) -> dict[str, Any]:
    return {"command": ["python", "train.py"], "resources": {"wallTimeSeconds": 600}, **extra}


def revision(
    workload_id: str = "w-train",
    number: int = 1,
    *,
    project: str = "demo",
    family: str = "queued-batch",
    spec: dict[str, Any] | None = None,
) -> wp.WorkloadRevision:
    service = family == "reconciled-service"
    body = spec if spec is not None else batch_spec()
    text = canonical_json(body)
    return wp.WorkloadRevision(
        workload_id=workload_id,
        project=project,
        repository_url="https://127.0.0.1:8443/git/demo.git",
        action="serve" if service else "train",
        action_type="k8s-deployment" if service else "slurm-job",
        family=family,
        environment="k8s" if service else "slurm",
        service_kind="application" if service else "",
        revision=number,
        commit=COMMIT,
        branch="main",
        spec_json=text,
        spec_digest="sha256:" + "0" * 64,
    )




def governance_copy(tmp_path: Path) -> Path:
    path = tmp_path / "governance.yaml"
    shutil.copy(ROOT / "examples" / "governance.yaml", path)
    return path


def cmd_meta(
    member: str = "m-alice", project: str = "demo", command_id: str | None = None
) -> common_pb2.CommandMetadata:
    return common_pb2.CommandMetadata(
        command_id=command_id or str(uuid.uuid4()), acting_member=member, project=project
    )


def query_meta(member: str = "m-alice", project: str = "demo") -> common_pb2.QueryMetadata:
    return common_pb2.QueryMetadata(acting_member=member, project=project)


@dataclass
class Stack:
    """Execution Core plus its doubles and a client, all running."""

    core: ExecutionCore
    site: SiteDouble
    portfolio: PortfolioDouble
    client: RequestClient
    events: EventLog
    governance: Path
    engine: AsyncEngine

    async def launch(self, workload_id: str = "w-train", number: int = 1, **kw: Any) -> str:
        member = kw.pop("member", "m-alice")
        reply = await self.client.request(
            pb.LaunchRun(metadata=cmd_meta(member), workload_id=workload_id, revision=number, **kw),
            timeout=15,
        )
        return reply.run_id

    async def get(self, run_id: str, member: str = "m-alice") -> pb.Run:
        return await self.client.request(
            pb.GetRun(metadata=query_meta(member), run_id=run_id), timeout=15
        )

    async def cancel(
        self, run_id: str, member: str = "m-alice", reason: str = "not needed"
    ) -> pb.CancelRunReply:
        return await self.client.request(
            pb.CancelRun(metadata=cmd_meta(member), run_id=run_id, reason=reason), timeout=15
        )

    async def wait_for(
        self, run_id: str, predicate: Callable[[pb.Run], bool], timeout: float = 30.0
    ) -> pb.Run:
        """Poll GetRun until ``predicate`` holds; fail with the last state seen."""
        deadline = asyncio.get_running_loop().time() + timeout
        run = await self.get(run_id)
        while not predicate(run):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"Run never reached the expected state; last: {run}")
            await asyncio.sleep(0.1)
            run = await self.get(run_id)
        return run

    async def consumed(self, message_ids: list[str], timeout: float = 30.0) -> None:
        """Wait until Execution Core's event consumer has receipts for every message id."""
        from sqlalchemy import func, select

        from metallo.messaging.schema import inbox_receipts

        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            async with self.engine.connect() as conn:
                n = (
                    await conn.execute(
                        select(func.count())
                        .select_from(inbox_receipts)
                        .where(inbox_receipts.c.message_id.in_(message_ids))
                    )
                ).scalar()
            if n == len(set(message_ids)):
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"only {n} of {len(message_ids)} events were consumed")
            await asyncio.sleep(0.05)

    async def terminal(self, run_id: str, timeout: float = 30.0) -> pb.Run:
        return await self.wait_for(run_id, lambda r: r.phase == "terminal", timeout)

    async def wait_events(self, cls, run_id: str, n: int = 1, timeout: float = 15.0) -> list[Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while len(self.events.of(cls, run_id)) < n:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"expected {n} {cls.__name__} for {run_id}")
            await asyncio.sleep(0.05)
        return self.events.of(cls, run_id)


@contextlib.asynccontextmanager
async def stack_factory(make_database, amqp_url: str, topology: Topology, tmp_path: Path):
    """Yield ``make(settings=FAST, parts=..., script=..., site=...) -> Stack``; stops every
    Stack on exit.

    Execution Core connects as its own principal, the client as the Go API's, the
    doubles as the harness (``amqp_url``; tests/bus.py).

    Test modules wrap it in their own ``make_stack`` fixture.
    """
    stacks: list[tuple[Stack, list]] = []
    engines: list[AsyncEngine] = []

    async def make(
        settings: Settings = FAST,
        parts: frozenset[str] | None = None,
        script: Script = happy_batch,
        fault=None,
        site: Any = None,
    ) -> Stack:
        url = await make_database("execution_core", MIGRATIONS)
        engine = create_engine(url)
        double_engine = await messaging_only_database(make_database, "ec_doubles")
        engines.extend([engine, double_engine])
        gov = governance_copy(tmp_path)
        extra = {} if fault is None else {"fault": fault}
        core = ExecutionCore(
            engine=engine,
            amqp_url=role_url("execution_core"),
            topology=topology,
            authority=GovernanceAuthority(GovernanceFile(gov)),
            settings=settings,
            relay_poll_seconds=0.05,
            **({"parts": parts} if parts is not None else {}),
            **extra,
        )
        portfolio = PortfolioDouble(double_engine, amqp_url, topology)
        portfolio.add(revision())
        # ``site``: a real Site Coordination (start/stop) in place of the double.
        site = site or SiteDouble(double_engine, amqp_url, topology, script=script)
        events = EventLog(double_engine, amqp_url, topology)
        client = RequestClient(role_url("go_api"), topology)
        started: list = []
        for part in (site, portfolio.server, events.consumer, core):
            await part.start()
            started.append(part)
        await client.start()
        stack = Stack(core, site, portfolio, client, events, gov, engine)
        stacks.append((stack, started))
        return stack

    try:
        yield make
    finally:
        for stack, started in stacks:
            await stack.client.close()
            for part in reversed(started):
                await part.stop()
        for engine in engines:
            await engine.dispose()
