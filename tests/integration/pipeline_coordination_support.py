"""Harness of the Pipeline Coordination integration tests.

Real PostgreSQL, RabbitMQ and git; Pipeline Coordination's real parts (server,
consumer, relay, coordinators). Its neighbours are replaced at the message level
only (tests/integration/pipeline_coordination_doubles.py); the repository is a
real bare git repository (tests/integration/pipeline_coordination_repo.py).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from metallo.common.v1 import common_pb2
from metallo.governance import GovernanceFile
from metallo.messaging import RequestClient, Topology
from metallo.messaging.schema import TABLES
from metallo.persistence.engine import create_engine, session_factory
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from pipeline_coordination.adaptors.governance_authority import GovernanceAuthority
from pipeline_coordination.adaptors.service import PipelineCoordination
from pipeline_coordination.adaptors.store import SqlPipelineStore
from pipeline_coordination.application.faults import FaultHook, no_fault
from pipeline_coordination.application.settings import Settings
from pipeline_coordination.domain.pipeline import Pipeline
from tests.bus import role_url
from tests.integration.pipeline_coordination_doubles import (
    PortfolioDouble,
    RunsDouble,
    messaging_database,
)
from tests.integration.pipeline_coordination_repo import ACTIONS, Repo

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "services" / "pipeline_coordination" / "migrations"
GOVERNANCE = ROOT / "examples" / "governance.yaml"

FAST = Settings(
    poll_seconds=0.05,
    lease_seconds=1.0,
    request_timeout_seconds=5.0,
    service_poll_seconds=0.1,
    batch_recheck_seconds=30.0,
    service_ready_timeout_seconds=60.0,
    retry_base_seconds=0.1,
    retry_max_seconds=0.5,
)


# ---------------------------------------------------------------- the harness


@dataclass
class Harness:
    """Pipeline Coordination (server, consumer, relay) + coordinators + doubles + a client."""

    engine: AsyncEngine
    amqp_url: str
    topology: Topology
    portfolio: PortfolioDouble
    runs: RunsDouble
    repo: Repo
    client: RequestClient
    service: PipelineCoordination
    coordinators: list[PipelineCoordination] = field(default_factory=list)

    def coordinator(self, fault: FaultHook = no_fault, settings: Settings = FAST) -> PipelineCoordination:
        """A coordinator-only process (started by the caller)."""
        part = PipelineCoordination(
            engine=self.engine,
            amqp_url=self.amqp_url,
            topology=self.topology,
            authority=self.service.authority,
            settings=settings,
            parts=frozenset({"coordinator"}),
            fault=fault,
        )
        self.coordinators.append(part)
        return part

    async def start_pipeline(
        self, member: str = "m-alice", actions: tuple[str, ...] = (), command_id: str | None = None,
        branch: str = "main", max_active: int = 0,
    ):
        return await self.client.request(
            pb.StartPipeline(
                metadata=common_pb2.CommandMetadata(command_id=command_id or str(uuid.uuid4()), acting_member=member, project="demo"),
                repository_url=self.repo.url,
                branch=branch,
                actions=list(actions),
                max_active=max_active,
            )
        )

    async def rerun_pipeline(self, pipeline_id: str, *, failed_only: bool, member: str = "m-alice", command_id: str | None = None):
        return await self.client.request(
            pb.RerunPipeline(
                metadata=common_pb2.CommandMetadata(command_id=command_id or str(uuid.uuid4()), acting_member=member, project="demo"),
                pipeline_id=pipeline_id,
                failed_only=failed_only,
            )
        )

    async def stop_pipeline(self, pipeline_id: str, member: str = "m-alice", reason: str = "enough"):
        return await self.client.request(
            pb.StopPipeline(
                metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member=member, project="demo"),
                pipeline_id=pipeline_id,
                reason=reason,
            )
        )

    async def get(self, pipeline_id: str, member: str = "m-alice") -> pb.Pipeline:
        return await self.client.request(
            pb.GetPipeline(metadata=common_pb2.QueryMetadata(acting_member=member, project="demo"), pipeline_id=pipeline_id)
        )

    async def load(self, pipeline_id: str) -> Pipeline:
        async with session_factory(self.engine)() as session:
            found = await SqlPipelineStore().load(session, pipeline_id)
        assert found is not None
        return found[0]

    async def until(self, check: Callable[[], Awaitable[bool] | bool], timeout: float = 30.0) -> None:
        """Wait until ``check()`` is true (fails the test after ``timeout`` seconds)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("condition not reached in time")
            await asyncio.sleep(0.05)

    async def until_state(self, pipeline_id: str, *states: str) -> Pipeline:
        async def reached() -> bool:
            return (await self.load(pipeline_id)).state in states

        await self.until(reached)
        return await self.load(pipeline_id)

    async def until_step(self, pipeline_id: str, index: int, *states: str) -> Pipeline:
        async def reached() -> bool:
            p = await self.load(pipeline_id)
            return len(p.steps) >= index and p.step(index).state in states

        await self.until(reached)
        return await self.load(pipeline_id)

    async def completed_events(self, pipeline_id: str) -> list[pb.PipelineCompleted]:
        """PipelineCompleted messages this Pipeline committed to the outbox."""
        messages = TABLES["outbox_messages"]
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(messages.c.body).where(messages.c.type == pb.PipelineCompleted.DESCRIPTOR.full_name)
            )
            events = [pb.PipelineCompleted.FromString(r.body) for r in rows]
        return [e for e in events if e.pipeline_id == pipeline_id]

    async def inbox_count(self) -> int:
        receipts = TABLES["inbox_receipts"]
        async with self.engine.connect() as conn:
            return (await conn.execute(select(func.count()).select_from(receipts))).scalar_one()


async def build(make_database, amqp_url: str, topology: Topology, base: Path, actions_yaml: str = ACTIONS) -> Harness:
    """Start everything but the coordinator (tests start one or several). Pipeline
    Coordination connects as its own principal (``Harness.amqp_url``), the client as
    the Go API's, the doubles as the harness (``amqp_url``; tests/bus.py)."""
    url = await make_database("pipeline_coordination", MIGRATIONS)
    engine = create_engine(url, pool_size=5)
    doubles_engine = await messaging_database(make_database, "pc_doubles")
    own_url = role_url("pipeline_coordination")
    service = PipelineCoordination(
        engine=engine,
        amqp_url=own_url,
        topology=topology,
        authority=GovernanceAuthority(GovernanceFile(GOVERNANCE)),
        settings=FAST,
        parts=frozenset({"relay", "server", "consumer"}),
        relay_poll_seconds=0.05,
    )
    portfolio = PortfolioDouble(doubles_engine, amqp_url, topology)
    runs = RunsDouble(doubles_engine, amqp_url, topology)
    client = RequestClient(role_url("go_api"), topology)
    repo = Repo.create(base, actions_yaml)
    await service.start()
    await portfolio.server.start()
    await runs.start()
    await client.start()
    h = Harness(engine, own_url, topology, portfolio, runs, repo, client, service)
    h._extra_engines = (doubles_engine,)  # type: ignore[attr-defined]
    return h


async def teardown(h: Harness) -> None:
    for c in h.coordinators:
        await c.stop()
    await h.client.close()
    await h.runs.stop()
    await h.portfolio.server.stop()
    await h.service.stop()
    for e in (h.engine, *h._extra_engines):  # type: ignore[attr-defined]
        await e.dispose()
