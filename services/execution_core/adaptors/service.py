"""The assembled Execution Core process: every moving part with start/stop.

Used by ``python -m execution_core`` and by the integration tests (which run
several instances against one database to race and restart them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from execution_core.adaptors.array_store import SqlArrayStore
from execution_core.adaptors.audit import TRAIL, register_audit_query
from execution_core.adaptors.messaging import (
    register_events,
    register_operator_requests,
    register_requests,
)
from execution_core.adaptors.run_store import SqlRunStore
from execution_core.adaptors.site_drain_store import SqlSiteDrainStore
from execution_core.adaptors.tables import RUNS_DUE_CHANNEL, RUNS_DUE_PLAN, RUNS_DUE_SUPERVISE
from execution_core.adaptors.workload_portfolio import PortfolioRevisions
from execution_core.application.array_groups import ArrayGroups
from execution_core.application.faults import FaultHook, no_fault
from execution_core.application.launch_worker import LaunchWorker
from execution_core.application.ports import ProjectAuthority
from execution_core.application.settings import Settings
from execution_core.application.supervisor import RunSupervisor
from metallo.lifecycle import Parts
from metallo.messaging import (
    CommandServer,
    EventConsumer,
    Outbox,
    OutboxRelay,
    RequestClient,
    Topology,
)
from metallo.persistence.engine import session_factory
from metallo.persistence.polling import PollingWorker
from metallo.persistence.wakeups import WakeListener

CONTEXT = "execution_core"


def wake_for(payload: str, *, planning: PollingWorker, supervision: PollingWorker) -> None:
    """Wake the worker a runs-due NOTIFY ``payload`` concerns (migration 0006):
    ``plan`` the launch worker, ``supervise`` the Run Supervisor, anything else
    (``""`` after a reconnect, trigger 0004's empty payload) both. A worker woken
    for nothing spends a claim transaction finding nothing."""
    if payload != RUNS_DUE_SUPERVISE:
        planning.wake()
    if payload != RUNS_DUE_PLAN:
        supervision.wake()


@dataclass
class ExecutionCore:
    """One Execution Core process. ``parts`` selects what runs (all by default)."""

    engine: AsyncEngine
    amqp_url: str
    topology: Topology
    authority: ProjectAuthority
    settings: Settings = field(default_factory=Settings)
    parts: frozenset[str] = frozenset({"server", "consumer", "relay", "launch", "supervisor"})
    fault: FaultHook = no_fault
    relay_poll_seconds: float = 1.0

    def __post_init__(self) -> None:
        self.store = SqlRunStore()
        self.outbox = Outbox(self.topology)
        self.sessions = session_factory(self.engine)
        self.client = RequestClient(self.amqp_url, self.topology)
        self.groups = ArrayGroups(self.store, SqlArrayStore(), self.outbox, self.settings)
        self.server = CommandServer(CONTEXT, self.engine, self.amqp_url, self.topology,
                                    audit=TRAIL)
        register_requests(
            self.server, self.store, self.authority, self.outbox, settings=self.settings,
            groups=self.groups,
        )
        self.drains = SqlSiteDrainStore()
        register_operator_requests(self.server, self.drains, self.authority,
                                   settings=self.settings)
        register_audit_query(self.server, self.authority)
        self.consumer = EventConsumer(CONTEXT, self.engine, self.amqp_url, self.topology)
        register_events(self.consumer, self.store, groups=self.groups)
        self.relay = OutboxRelay(
            self.engine,
            self.amqp_url,
            self.topology,
            owner=CONTEXT,
            poll_seconds=self.relay_poll_seconds,
        )
        self.launch_worker = LaunchWorker(
            self.sessions,
            self.store,
            self.authority,
            PortfolioRevisions(
                self.client,
                timeout=self.settings.workload_query_timeout_seconds,
                cache_seconds=self.settings.workload_cache_seconds,
            ),
            self.outbox,
            self.settings,
            fault=self.fault,
            drains=self.drains,
            groups=self.groups,
        )
        self.supervisor = RunSupervisor(
            self.sessions, self.store, self.outbox, self.settings, fault=self.fault,
            drains=self.drains, groups=self.groups,
        )
        # A Run made due (trigger, migrations 0004 and 0006) ends the idle wait of the
        # worker its phase concerns: 'plan' the launch worker, 'supervise' the supervisor.
        self.wakeups = WakeListener(
            self.engine.url, RUNS_DUE_CHANNEL, self._wake_workers, payload=True
        )
        self._running = Parts()

    def _wake_workers(self, payload: str) -> None:
        wake_for(payload, planning=self.launch_worker, supervision=self.supervisor)

    async def start(self) -> None:
        """Start the selected parts (the relay first, so replies can flow)."""
        order = [
            ("relay", self.relay),
            ("server", self.server),
            ("consumer", self.consumer),
            ("launch", self.client),
            ("launch", self.launch_worker),
            ("supervisor", self.supervisor),
            ("wakeups", self.wakeups),
        ]
        selected = set(self.parts)
        if selected & {"launch", "supervisor"}:
            selected.add("wakeups")
        await self._running.start(order, selected)

    async def stop(self) -> None:
        """Stop what was started, newest first."""
        await self._running.stop()
