"""Transactional outbox writer (DESIGN.md, Messaging).

Messages are written in the caller's transaction, beside the domain rows they
describe; :class:`~metallo.messaging.relay.OutboxRelay` publishes them after
commit. A rolled-back transaction leaves no row, so nothing is published.

Per-aggregate order: the writer takes a transaction-scoped advisory lock on the
aggregate before inserting, so rows of one aggregate get increasing ids in
commit order; the relay publishes an aggregate's rows in id order.

A transaction's first message is written at once, through SQLAlchemy (which
emits BEGIN, or a savepoint's SAVEPOINT, lazily). Later ones wait in the session
and are written together, in call order, by one statement on the transaction's
asyncpg connection — same connection, same transaction (docs/decisions/0007,
0009) — at the first of: the transaction's (or savepoint's) commit, the next
``session.execute``, or a new savepoint's start. A savepoint rolled back drops
its waiting messages; so does a rolled-back transaction. Statements run on
``session.connection()`` directly do not see messages still waiting.
"""

from __future__ import annotations

import json
import uuid
import weakref
from functools import lru_cache

import asyncpg
from google.protobuf.message import Message
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.util import await_only

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
# order (two writers never wait on each other crosswise), then the rows in call
# order (ORDINALITY), so each aggregate's ids still follow commit order.
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

_PENDING = "metallo.outbox.pending"  # session.info: [(asyncpg connection, values)], call order


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
        """Insert the message and its dispatch row in the session's transaction."""
        message_id = uuid.uuid4()
        values = (
            message_id,
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
        driver = _driver_of(session)
        if driver is not None:
            session.info.setdefault(_PENDING, []).append((driver, values))
            return message_id
        connection = await session.connection()
        driver = (await connection.get_raw_connection()).driver_connection
        if driver.is_in_transaction():
            session.info.setdefault(_PENDING, []).append((driver, values))
        else:
            # Not begun on the database yet (SQLAlchemy begins it with its first
            # statement) or an autocommit session: SQLAlchemy runs it at once.
            await connection.exec_driver_sql(_WRITE, values)
        transaction = _innermost_transaction(session)
        if driver.is_in_transaction() and transaction is not None:
            session.info[_DRIVER] = (weakref.ref(transaction), driver)
        return message_id


def _write_pending(session: Session) -> None:
    """Write the session's waiting messages now, in call order, one statement per
    connection (SQLAlchemy calls this in its greenlet, where ``await_only`` works)."""
    pending = session.info.pop(_PENDING, None)
    if not pending:
        return
    driver = pending[0][0]
    if any(d is not driver for d, _ in pending):  # cannot happen: one session, one connection
        raise RuntimeError("outbox messages waiting on more than one connection")
    rows = [values for _, values in pending]
    if len(rows) == 1:
        await_only(driver.execute(_WRITE, *rows[0]))
        return
    columns = list(zip(*(r[:9] for r in rows), strict=True))
    await_only(driver.execute(_WRITE_MANY, *(list(c) for c in columns), NOTIFY_CHANNEL))


def _drop_pending(session: Session, *_args) -> None:
    """A rolled-back transaction or savepoint: its waiting messages are never written
    (every waiting message belongs to the innermost transaction, see below)."""
    session.info.pop(_PENDING, None)


def _before_savepoint(session: Session, transaction) -> None:
    # A new savepoint: write the enclosing transaction's waiting messages first —
    # SQLAlchemy emits SAVEPOINT lazily, so they land outside it. Hence the waiting
    # messages always belong to the innermost open transaction.
    if transaction.nested:
        _write_pending(session)


def _before_statement(orm_execute_state) -> None:
    _write_pending(orm_execute_state.session)


def _after_end(session: Session, transaction) -> None:
    if transaction.parent is None:  # the session's transaction ended (committed or not)
        session.info.pop(_PENDING, None)
        session.info.pop(_DRIVER, None)


event.listen(Session, "before_commit", _write_pending)  # a transaction's or savepoint's commit
event.listen(Session, "after_soft_rollback", _drop_pending)
event.listen(Session, "after_transaction_create", _before_savepoint)
event.listen(Session, "do_orm_execute", _before_statement)
event.listen(Session, "after_transaction_end", _after_end)
