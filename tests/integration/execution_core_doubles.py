"""Execution Core's neighbours at the message level, for its integration tests.

- :class:`PortfolioDouble` — a ``workload_portfolio`` CommandServer answering
  ``GetWorkloadRevision`` with fixed revisions;
- :class:`SiteDouble` — a ``site_coordination`` CommandServer receiving every
  ``AppendSiteCommand`` and publishing ``SiteCommandResultRecorded`` through its
  own transactional outbox, as Site Coordination does. A ``script`` decides each
  command's result (or holds it): :func:`result` builds one, :func:`happy_batch`
  answers every command of a batch Run as a Site that runs it to success;
- :class:`EventLog` — collects Execution Core's events from its own queue.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from execution_core.domain.canonical import canonical_json
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import (
    CommandServer,
    EventConsumer,
    Outbox,
    OutboxRelay,
    Rejected,
    Topology,
)
from metallo.messaging.schema import TABLES
from metallo.persistence.engine import create_engine, session_factory
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp


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
