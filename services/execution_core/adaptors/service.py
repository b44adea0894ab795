"""The assembled Execution Core process: every moving part with start/stop.

Used by ``python -m execution_core`` and by the integration tests (which run
several instances against one database to race and restart them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from execution_core.adaptors.messaging import register_events, register_requests
from execution_core.adaptors.run_store import SqlRunStore
from execution_core.adaptors.tables import RUNS_DUE_CHANNEL
from execution_core.adaptors.workload_portfolio import PortfolioRevisions
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
from metallo.persistence.wakeups import WakeListener

CONTEXT = "execution_core"


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
        self.server = CommandServer(CONTEXT, self.engine, self.amqp_url, self.topology)
        register_requests(
            self.server, self.store, self.authority, self.outbox, settings=self.settings
        )
        self.consumer = EventConsumer(CONTEXT, self.engine, self.amqp_url, self.topology)
        register_events(self.consumer, self.store)
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
            PortfolioRevisions(self.client, timeout=self.settings.workload_query_timeout_seconds),
            self.outbox,
            self.settings,
            fault=self.fault,
        )
        self.supervisor = RunSupervisor(
            self.sessions, self.store, self.outbox, self.settings, fault=self.fault
        )
        # A Run made due (trigger, migration 0004) ends both workers' idle waits.
        self.wakeups = WakeListener(self.engine.url, RUNS_DUE_CHANNEL, self._wake_workers)
        self._running = Parts()

    def _wake_workers(self) -> None:
        self.launch_worker.wake()
        self.supervisor.wake()

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
