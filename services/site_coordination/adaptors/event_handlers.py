"""Events Site Coordination consumes: Execution Core's ``RunCompleted`` ends the
Run's repository grants, each revocation audited (inbox receipt in the same
transaction, so a redelivery has no second effect)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import EventConsumer, Topology
from site_coordination.adaptors import audit
from site_coordination.adaptors.lab_git.tokens import LabSourceControl
from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.adaptors.run_ends_store import PostgresRunEnds
from site_coordination.application.run_ends import run_ended

#: The consumer's name; its queue is ``<prefix>site_coordination.events``.
CONSUMER = "site_coordination"


def build_event_consumer(engine: AsyncEngine, amqp_url: str,
                         topology: Topology) -> EventConsumer:
    """An :class:`EventConsumer` applying ``execution_core.RunCompleted.v1``."""
    consumer = EventConsumer(CONSUMER, engine, amqp_url, topology)

    @consumer.on(ec.RunCompleted)
    async def on_run_completed(session: AsyncSession, event: ec.RunCompleted) -> None:
        store = PostgresSiteStore(session)
        revoked = await run_ended(PostgresRunEnds(session), store, LabSourceControl(session),
                                  event.run_id, event.outcome)
        await audit.record_repository_grant_revocations(session, store, revoked,
                                                        reason="run-ended")

    return consumer
