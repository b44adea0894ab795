"""The assembled Pipeline Coordination process: every moving part with start/stop.

Used by ``python -m pipeline_coordination`` and by the integration tests, which
start, kill and restart the coordinator separately (``parts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

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
from metallo.repository_policy import RepositoryPolicy
from pipeline_coordination.adaptors.audit import TRAIL, register_audit_query
from pipeline_coordination.adaptors.execution_core import ExecutionCoreClient
from pipeline_coordination.adaptors.messaging import (
    register_collection_requests,
    register_events,
    register_requests,
)
from pipeline_coordination.adaptors.projection import collection_completed, pipeline_completed
from pipeline_coordination.adaptors.store import SqlPipelineStore
from pipeline_coordination.adaptors.workload_portfolio import PortfolioClient
from pipeline_coordination.application.coordinator import Coordinator
from pipeline_coordination.application.faults import FaultHook, no_fault
from pipeline_coordination.application.ports import ProjectAuthority
from pipeline_coordination.application.settings import Settings

CONTEXT = "pipeline_coordination"
ALL_PARTS = frozenset({"relay", "server", "consumer", "coordinator"})


@dataclass
class PipelineCoordination:
    """One Pipeline Coordination process. ``parts`` selects what runs (all by default)."""

    engine: AsyncEngine
    amqp_url: str
    topology: Topology
    authority: ProjectAuthority
    settings: Settings = field(default_factory=Settings)
    parts: frozenset[str] = ALL_PARTS
    fault: FaultHook = no_fault
    relay_poll_seconds: float = 1.0
    repository_policy: RepositoryPolicy | None = None  # StartPipeline's early check

    def __post_init__(self) -> None:
        self.store = SqlPipelineStore()
        self.sessions = session_factory(self.engine)
        self.outbox = Outbox(self.topology)
        self.client = RequestClient(self.amqp_url, self.topology)
        self.server = CommandServer(CONTEXT, self.engine, self.amqp_url, self.topology,
                                    audit=TRAIL)
        register_requests(self.server, self.store, self.authority, self.repository_policy)
        register_collection_requests(self.server, self.store, self.authority)
        register_audit_query(self.server, self.authority)
        self.consumer = EventConsumer(CONTEXT, self.engine, self.amqp_url, self.topology)
        register_events(self.consumer, self.store)
        self.relay = OutboxRelay(
            self.engine, self.amqp_url, self.topology, owner=CONTEXT, poll_seconds=self.relay_poll_seconds
        )
        timeout = self.settings.request_timeout_seconds
        self.coordinator = Coordinator(
            self.sessions,
            self.store,
            PortfolioClient(self.client, timeout=timeout),
            ExecutionCoreClient(self.client, timeout=timeout),
            self.outbox,
            pipeline_completed,
            self.settings,
            fault=self.fault,
            collection_event=collection_completed,
        )
        self._running = Parts()

    async def start(self) -> None:
        """Start the selected parts (the relay first, so replies and events flow)."""
        order = [
            ("relay", self.relay),
            ("server", self.server),
            ("consumer", self.consumer),
            ("coordinator", self.client),
            ("coordinator", self.coordinator),
        ]
        await self._running.start(order, self.parts)

    async def stop(self) -> None:
        """Stop what was started, newest first."""
        await self._running.stop()
