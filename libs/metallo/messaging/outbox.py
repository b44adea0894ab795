"""Transactional outbox writer (DESIGN.md, Messaging).

Messages are written in the caller's transaction, beside the domain rows they
describe; :class:`~metallo.messaging.relay.OutboxRelay` publishes them after
commit. A rolled-back transaction leaves no row, so nothing is published.

Per-aggregate order: the writer takes a transaction-scoped advisory lock on the
aggregate before inserting, so rows of one aggregate get increasing ids in
commit order; the relay publishes an aggregate's rows in id order.
"""

from __future__ import annotations

import uuid

from google.protobuf.message import Message
from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from metallo.messaging.schema import outbox_dispatch, outbox_messages
from metallo.messaging.topology import Topology, contract_version, event_routing_key, request_routing_key

NOTIFY_CHANNEL = "metallo_outbox"


class Outbox:
    """Writes outgoing messages into the current transaction's outbox rows."""

    def __init__(self, topology: Topology):
        self.topology = topology

    async def publish_event(
        self, session: AsyncSession, message: Message, *, aggregate_id: str
    ) -> uuid.UUID:
        """Queue an integration event on the events exchange; return its message_id."""
        return await self._write(
            session,
            message,
            kind="event",
            exchange=self.topology.events_exchange,
            routing_key=event_routing_key(message),
            aggregate_id=aggregate_id,
        )

    async def send_command(
        self, session: AsyncSession, message: Message, *, aggregate_id: str
    ) -> uuid.UUID:
        """Queue a one-way command to its owner's command queue; return its message_id."""
        _owner, key = request_routing_key(message)
        return await self._write(
            session,
            message,
            kind="command",
            exchange=self.topology.commands_exchange,
            routing_key=key,
            aggregate_id=aggregate_id,
        )

    async def send_reply(
        self, session: AsyncSession, message: Message, *, reply_to: str, correlation_id: str | None
    ) -> uuid.UUID:
        """Queue a reply to ``reply_to`` (default exchange) with the request's correlation id."""
        return await self._write(
            session,
            message,
            kind="reply",
            exchange="",
            routing_key=reply_to,
            aggregate_id=f"reply:{correlation_id or uuid.uuid4()}",
            correlation_id=correlation_id,
        )

    async def _write(
        self,
        session: AsyncSession,
        message: Message,
        *,
        kind: str,
        exchange: str,
        routing_key: str,
        aggregate_id: str,
        correlation_id: str | None = None,
    ) -> uuid.UUID:
        message_id = uuid.uuid4()
        await session.execute(
            select(func.pg_advisory_xact_lock(func.hashtextextended(aggregate_id, 0)))
        )
        pk = (
            await session.execute(
                insert(outbox_messages)
                .values(
                    message_id=message_id,
                    aggregate_id=aggregate_id,
                    kind=kind,
                    exchange=exchange,
                    routing_key=routing_key,
                    type=message.DESCRIPTOR.full_name,
                    body=message.SerializeToString(deterministic=True),
                    correlation_id=correlation_id,
                    headers={"contract-version": contract_version(message)},
                )
                .returning(outbox_messages.c.id)
            )
        ).scalar_one()
        await session.execute(insert(outbox_dispatch).values(message_pk=pk, aggregate_id=aggregate_id))
        await session.execute(text("SELECT pg_notify(:c, '')"), {"c": NOTIFY_CHANNEL})
        return message_id
