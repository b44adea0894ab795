"""Harness of the Execution Core integration tests.

Real PostgreSQL and RabbitMQ; Execution Core's real parts. Its neighbours are
replaced at the message level only:

- :class:`PortfolioDouble` — a ``workload_portfolio`` CommandServer answering
  ``GetWorkloadRevision`` with fixed revisions;
- :class:`SiteDouble` — a ``site_coordination`` CommandServer receiving every
  ``AppendSiteCommand`` and publishing ``SiteCommandResultRecorded`` through its
  own transactional outbox, as Site Coordination does. A ``script`` decides each command's result (or holds it).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
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
from metallo.messaging import (
    CommandServer,
    EventConsumer,
    Outbox,
    OutboxRelay,
    Rejected,
    RequestClient,
    Topology,
)
from metallo.messaging.schema import TABLES
from metallo.persistence.engine import create_engine, session_factory
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.bus import role_url

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


async def messaging_only_database(make_database, name: str) -> AsyncEngine:
    """A throw-away database holding only the messaging tables (for a double)."""
    url = await make_database(name)
    engine = create_engine(url, pool_size=4)
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: next(iter(TABLES.values())).metadata.create_all(c))
    return engine


class PortfolioDouble:
    """Workload Portfolio at the message level: fixed revisions by (workload, revision)."""

    def __init__(self, engine: AsyncEngine, amqp_url: str, topology: Topology):
        self.revisions: dict[tuple[str, int], wp.WorkloadRevision] = {}
        self.server = CommandServer("workload_portfolio", engine, amqp_url, topology)

        @self.server.query(wp.GetWorkloadRevision)
        async def get(session, q):
            found = self.revisions.get((q.workload_id, q.revision))
            if found is None or found.project != q.metadata.project:
                raise Rejected("not-found", f"no revision {q.revision} of {q.workload_id}")
            return found

    def add(self, rev: wp.WorkloadRevision) -> None:
        self.revisions[(rev.workload_id, rev.revision)] = rev


Script = Callable[[sc.AppendSiteCommand, "SiteDouble"], dict[str, Any] | None]


def result(
    cmd: sc.AppendSiteCommand,
    outcome: str = "succeeded",
    code: str | None = None,
    message: str | None = None,
    **observation: Any,
) -> dict:
    """A result JSON as docs/site-commands.md describes it."""
    jobs = []
    if cmd.kind in ("start", "apply"):
        jobs = [{"stage": "compute", "job_id": f"job-{cmd.attempt_number}"}]
    return {
        "command_id": cmd.metadata.command_id,
        "outcome": outcome,
        "code": code,
        "message": message,
        "native_jobs": jobs,
        "observation": observation or None,
    }


def happy_batch(cmd: sc.AppendSiteCommand, double: SiteDouble) -> dict | None:
    """prepare ✓, start ✓ (queued), first observe running, second observe succeeded."""
    if cmd.kind == "prepare":
        return result(cmd, phase="prepared")
    if cmd.kind == "start":
        return result(cmd, phase="queued", native_state="PENDING")
    if cmd.kind == "observe":
        n = double.count(cmd.attempt_id, "observe")
        if n < 2:
            return result(cmd, phase="running", native_state="RUNNING")
        return result(
            cmd, phase="succeeded", native_state="COMPLETED", exit_code=0, output_commit="f" * 40
        )
    if cmd.kind == "cancel":
        return result(cmd)
    return None


@dataclass
class SiteDouble:
    """Site Coordination at the message level (see module doc)."""

    engine: AsyncEngine
    amqp_url: str
    topology: Topology
    script: Script = happy_batch
    received: list[sc.AppendSiteCommand] = field(default_factory=list)
    held: dict[str, sc.AppendSiteCommand] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.outbox = Outbox(self.topology)
        self.sessions = session_factory(self.engine)
        self.server = CommandServer("site_coordination", self.engine, self.amqp_url, self.topology)
        self.relay = OutboxRelay(
            self.engine, self.amqp_url, self.topology, owner="sc-double", poll_seconds=0.05
        )
        self._sequence: dict[tuple[str, str], int] = defaultdict(int)

        @self.server.command(sc.AppendSiteCommand)
        async def append(session, cmd):
            key = (cmd.site_id, cmd.environment)
            self._sequence[key] += 1
            seq = self._sequence[key]
            self.received.append(cmd)
            answer = self.script(cmd, self)
            if answer is None:
                self.held[cmd.metadata.command_id] = cmd
            else:
                await self._publish_result(session, cmd, answer, seq)
            return sc.SiteCommandAppended(command_id=cmd.metadata.command_id, sequence=seq)

    async def _publish_result(
        self, session, cmd: sc.AppendSiteCommand, answer: dict, seq: int = 0
    ) -> str:
        message_id = await self.outbox.publish_event(
            session,
            sc.SiteCommandResultRecorded(
                command_id=cmd.metadata.command_id,
                site_id=cmd.site_id,
                environment=cmd.environment,
                sequence=seq,
                kind=cmd.kind,
                run_id=cmd.run_id,
                attempt_id=cmd.attempt_id,
                result_json=canonical_json(answer),
            ),
            aggregate_id=f"stream:{cmd.site_id}",
        )
        return str(message_id)

    async def resolve(self, command_id: str, answer: dict) -> str:
        """Record a held command's result now (the Runtime answered late); return the event's message id."""
        cmd = self.held.pop(command_id, None) or next(
            c for c in self.received if c.metadata.command_id == command_id
        )
        async with self.sessions() as session, session.begin():
            return await self._publish_result(session, cmd, answer)

    async def notice_native_end(self, cmd: sc.AppendSiteCommand) -> str:
        """Publish ``SiteNativeEndNoticed`` for ``cmd``'s Attempt, as Site Coordination does
        when its Runtime noticed the end (ADR 0016); return the event's message id."""
        async with self.sessions() as session, session.begin():
            return str(
                await self.outbox.publish_event(
                    session,
                    sc.SiteNativeEndNoticed(
                        site_id=cmd.site_id,
                        environment=cmd.environment,
                        run_id=cmd.run_id,
                        attempt_id=cmd.attempt_id,
                    ),
                    aggregate_id=f"stream:{cmd.site_id}",
                )
            )

    async def report_progress(self, cmd: sc.AppendSiteCommand, code: str) -> str:
        """Publish ``SiteProgressReported`` (a deferral of the held ``cmd``), as Site
        Coordination does when its Runtime reports one; return the event's message id."""
        async with self.sessions() as session, session.begin():
            return str(
                await self.outbox.publish_event(
                    session,
                    sc.SiteProgressReported(
                        command_id=cmd.metadata.command_id,
                        site_id=cmd.site_id,
                        sequence=1,
                        code=code,
                        run_id=cmd.run_id,
                        attempt_id=cmd.attempt_id,
                    ),
                    aggregate_id=f"stream:{cmd.site_id}",
                )
            )

    def count(self, attempt_id: str, kind: str) -> int:
        return sum(1 for c in self.received if c.attempt_id == attempt_id and c.kind == kind)

    def kinds(self, run_id: str) -> list[tuple[int, str]]:
        return [(c.attempt_number, c.kind) for c in self.received if c.run_id == run_id]

    def assert_no_duplicates(self) -> None:
        """Each command id once; each non-observe step once per Attempt."""
        ids = [c.metadata.command_id for c in self.received]
        assert len(ids) == len(set(ids)), "a Site command was appended twice"
        steps = [(c.attempt_id, c.kind) for c in self.received if c.kind != "observe"]
        assert len(steps) == len(set(steps)), f"a step was sent twice: {steps}"

    async def start(self) -> None:
        await self.relay.start()
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
        await self.relay.stop()


class EventLog:
    """Collects Execution Core's events from the events exchange (its own queue)."""

    def __init__(self, engine: AsyncEngine, amqp_url: str, topology: Topology):
        self.events: list[Any] = []
        self.consumer = EventConsumer("ec_test_listener", engine, amqp_url, topology)
        for cls in (pb.RunAccepted, pb.RunStarted, pb.RunCompleted):
            self.consumer.on(cls)(self._collect)

    async def _collect(self, session, event) -> None:
        self.events.append(event)

    def of(self, cls, run_id: str) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls) and e.run_id == run_id]


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
