"""Transactional outbox writer (DESIGN.md, Messaging).

Messages are written in the caller's transaction, beside the domain rows they
describe; :class:`~metallo.messaging.relay.OutboxRelay` publishes them after
commit. A rolled-back transaction leaves no row, so nothing is published.

Per-aggregate order: the writer takes a transaction-scoped advisory lock on the
aggregate before inserting, so rows of one aggregate get increasing ids in
commit order; the relay publishes an aggregate's rows in id order.

The write is one statement. Once the session's transaction (or savepoint) is
open on the database, it runs on that transaction's asyncpg connection directly
— same connection, same transaction — because SQLAlchemy's per-statement work
cost more CPU than the round trip itself (docs/decisions/0007). SQLAlchemy opens
transactions and savepoints lazily, so the first write in each asks it for the
connection (which emits a savepoint's SAVEPOINT), and a write that is its
transaction's first statement goes through it (``exec_driver_sql``: BEGIN).

:meth:`Outbox.publish_events` writes several events in one statement (one round
trip) — for a transaction that emits several at once (docs/decisions/0009).
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import Sequence
from functools import lru_cache

import asyncpg
from google.protobuf.message import Message
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
# repeats within a transaction into one). Numbered parameters ($1…), which both
# asyncpg and SQLAlchemy's asyncpg dialect (``exec_driver_sql``) take.
_WRITE = """
WITH lock AS (
    SELECT pg_advisory_xact_lock(hashtextextended($2, 0))
), m AS (
    INSERT INTO outbox_messages
        (message_id, aggregate_id, kind, exchange, routing_key, type, body, correlation_id, headers)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, CAST($9::text AS jsonb)
    FROM lock
    RETURNING id, aggregate_id
), d AS (
    INSERT INTO outbox_dispatch (message_pk, aggregate_id) SELECT id, aggregate_id FROM m
    RETURNING message_pk
)
SELECT pg_notify($10, '') FROM d
"""


# Several messages in one round trip: the aggregates' locks first, in a fixed
# order (two such writers never wait on each other crosswise), then the rows in
# the given order (ORDINALITY), so each aggregate's ids still follow commit order.
_WRITE_MANY = """
WITH lock AS (
    SELECT count(pg_advisory_xact_lock(hashtextextended(a, 0))) AS n
    FROM (SELECT DISTINCT a FROM unnest($2::text[]) AS a ORDER BY a) s
), m AS (
    INSERT INTO outbox_messages
        (message_id, aggregate_id, kind, exchange, routing_key, type, body, correlation_id, headers)
    SELECT u.message_id, u.aggregate_id, u.kind, u.exchange, u.routing_key, u.type, u.body,
           u.correlation_id, CAST(u.headers AS jsonb)
    FROM lock, unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                      $7::bytea[], $8::text[], $9::text[])
         WITH ORDINALITY AS u(message_id, aggregate_id, kind, exchange, routing_key, type, body,
                              correlation_id, headers, n)
    ORDER BY u.n
    RETURNING id, aggregate_id
), d AS (
    INSERT INTO outbox_dispatch (message_pk, aggregate_id) SELECT id, aggregate_id FROM m
    RETURNING message_pk
)
SELECT pg_notify($10, '') FROM (SELECT 1 FROM d LIMIT 1) AS any_row
"""
MAX_EVENTS_PER_WRITE = 1000  # bounds one statement's size; more are written in slices


@lru_cache(maxsize=16)
def _headers_json(version: str) -> str:
    return json.dumps({"contract-version": version})


_DRIVER = "metallo.outbox.driver"  # session.info: (innermost transaction, its asyncpg connection)


def _innermost_transaction(session: AsyncSession):
    """The session's current savepoint, else its transaction, else None."""
    sync = session.sync_session
    return sync.get_nested_transaction() or sync.get_transaction()


def _driver_of(session: AsyncSession) -> asyncpg.Connection | None:
    """The asyncpg connection noted for the session's innermost transaction, while
    that is open on the database; None otherwise, and the caller asks SQLAlchemy:
    it emits a new savepoint's SAVEPOINT only when asked for the connection."""
    noted = session.info.get(_DRIVER)
    if noted is None:
        return None
    transaction, driver = noted
    current = _innermost_transaction(session)
    if current is None or transaction() is not current or not driver.is_in_transaction():
        return None
    return driver


class Outbox:
    """Writes outgoing messages into the current transaction's outbox rows.

    A failed write (a deadlock on the aggregate lock, a lost connection) raises
    SQLAlchemy's error when the write went through SQLAlchemy and asyncpg's
    (``asyncpg.PostgresError``, ``asyncpg.InterfaceError``) when it ran on the
    driver connection; either way the transaction must be rolled back. Writes
    do not autoflush pending ORM objects (the outbox rows do not depend on them).
    """

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

    async def publish_events(
        self, session: AsyncSession, events: Sequence[tuple[Message, str]]
    ) -> list[uuid.UUID]:
        """Queue several integration events — ``(message, aggregate_id)`` pairs, in
        order — with one statement per 1,000; return their message_ids in order.

        The same rows, locks and order as that many :meth:`publish_event` calls,
        written now in one round trip (docs/decisions/0009). Raises TypeError for an
        aggregate_id that is not a non-empty str; database errors as
        :meth:`publish_event` does.
        """
        rows = []
        for message, aggregate_id in events:
            if not isinstance(aggregate_id, str) or not aggregate_id:
                raise TypeError(f"aggregate_id must be a non-empty str, not {aggregate_id!r}")
            rows.append(self._values(message, kind="event", exchange=self.topology.events_exchange,
                                     routing_key=event_routing_key(message), aggregate_id=aggregate_id))
        for start in range(0, len(rows), MAX_EVENTS_PER_WRITE):
            chunk = rows[start : start + MAX_EVENTS_PER_WRITE]
            if len(chunk) == 1:
                await self._execute(session, _WRITE, chunk[0])
            else:
                columns = [list(c) for c in zip(*(r[:9] for r in chunk), strict=True)]
                await self._execute(session, _WRITE_MANY, (*columns, NOTIFY_CHANNEL))
        return [r[0] for r in rows]

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

    async def _write(self, session: AsyncSession, message: Message, **fields: str | None) -> uuid.UUID:
        """Insert the message and its dispatch row in the session's transaction
        (``fields``: those of :meth:`_values`)."""
        values = self._values(message, **fields)
        await self._execute(session, _WRITE, values)
        return values[0]

    @staticmethod
    def _values(
        message: Message,
        *,
        kind: str,
        exchange: str,
        routing_key: str,
        aggregate_id: str,
        correlation_id: str | None = None,
    ) -> tuple:
        """One row's statement parameters ($1…$10 of ``_WRITE``); $1 is the new message_id."""
        return (
            uuid.uuid4(),
            aggregate_id,
            kind,
            exchange,
            routing_key,
            message.DESCRIPTOR.full_name,
            message.SerializeToString(deterministic=True),
            correlation_id,
            _headers_json(contract_version(message)),
            NOTIFY_CHANNEL,
        )

    @staticmethod
    async def _execute(session: AsyncSession, statement: str, values: tuple) -> None:
        """Run one outbox statement in the session's transaction (see module doc)."""
        driver = _driver_of(session)
        if driver is not None:
            await driver.execute(statement, *values)
            return
        connection = await session.connection()
        driver = (await connection.get_raw_connection()).driver_connection
        if driver.is_in_transaction():
            await driver.execute(statement, *values)
        else:
            # Not begun on the database yet (SQLAlchemy begins it with its first
            # statement) or an autocommit session: SQLAlchemy runs it.
            await connection.exec_driver_sql(statement, values)
        transaction = _innermost_transaction(session)
        if driver.is_in_transaction() and transaction is not None:
            session.info[_DRIVER] = (weakref.ref(transaction), driver)
