"""Transactional outbox writer (DESIGN.md, Messaging).

Messages are written in the caller's transaction, beside the domain rows they
describe; :class:`~metallo.messaging.relay.OutboxRelay` publishes them after
commit. A rolled-back transaction leaves no row, so nothing is published.

Per-aggregate order: the writer takes a transaction-scoped advisory lock on the
aggregate before inserting, so rows of one aggregate get increasing ids in
commit order; the relay publishes an aggregate's rows in id order.
"""

from __future__ import annotations

import json
import uuid

from google.protobuf.message import Message
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from metallo.messaging.topology import (
    Topology,
    contract_version,
    event_routing_key,
    request_routing_key,
)

NOTIFY_CHANNEL = "metallo_outbox"

# One round trip per message: the advisory lock on the aggregate is taken before
# the row's id is drawn (the INSERT selects FROM the lock), so an aggregate's rows
# get ids in commit order; the NOTIFY is delivered at commit (PostgreSQL folds
# repeats within a transaction into one).
_WRITE = text(
    """
WITH lock AS (
    SELECT pg_advisory_xact_lock(hashtextextended(:aggregate_id, 0))
), m AS (
    INSERT INTO outbox_messages
        (message_id, aggregate_id, kind, exchange, routing_key, type, body, correlation_id, headers)
    SELECT :message_id, :aggregate_id, :kind, :exchange, :routing_key, :type, :body,
           :correlation_id, CAST(:headers AS jsonb)
    FROM lock
    RETURNING id, aggregate_id
), d AS (
    INSERT INTO outbox_dispatch (message_pk, aggregate_id) SELECT id, aggregate_id FROM m
    RETURNING message_pk
)
SELECT pg_notify(:channel, '') FROM d
"""
)


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
            _WRITE,
            {
                "message_id": message_id,
                "aggregate_id": aggregate_id,
                "kind": kind,
                "exchange": exchange,
                "routing_key": routing_key,
                "type": message.DESCRIPTOR.full_name,
                "body": message.SerializeToString(deterministic=True),
                "correlation_id": correlation_id,
                "headers": json.dumps({"contract-version": contract_version(message)}),
                "channel": NOTIFY_CHANNEL,
            },
        )
        return message_id
