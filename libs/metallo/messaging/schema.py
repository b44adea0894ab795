"""Tables of the messaging layer, present in every service database.

- ``outbox_messages``: immutable rows (what to publish, where, in which order);
- ``outbox_dispatch``: their dispatch state — ``pending`` | ``done`` | ``dead``,
  attempts, next-attempt time, last error, and a fenced lease (token + generation);
- ``inbox_receipts``: one per (consumer, message_id) with the sha256 of the body;
- ``command_receipts``: command_id → input fingerprint and saved outcome.

Services add them to their MetaData with :func:`add_messaging_tables` and create
them in their first Alembic revision with :func:`create_messaging_tables`.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

from metallo.persistence.leases import lease_columns


def add_messaging_tables(metadata: MetaData) -> dict[str, Table]:
    """Define the four messaging tables on ``metadata``; return them by name."""
    messages = Table(
        "outbox_messages",
        metadata,
        Column("id", BigInteger, Identity(always=True), primary_key=True),
        Column("message_id", UUID(as_uuid=True), nullable=False, unique=True),
        Column("aggregate_id", Text, nullable=False),
        Column("kind", Text, nullable=False),  # event | command | reply
        Column("exchange", Text, nullable=False),
        Column("routing_key", Text, nullable=False),
        Column("type", Text, nullable=False),
        Column("body", LargeBinary, nullable=False),
        Column("correlation_id", Text),
        Column("headers", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    )
    dispatch = Table(
        "outbox_dispatch",
        metadata,
        Column("message_pk", BigInteger, ForeignKey("outbox_messages.id"), primary_key=True),
        Column("aggregate_id", Text, nullable=False),
        Column("state", Text, nullable=False, server_default="pending"),
        Column("attempts", Integer, nullable=False, server_default="0"),
        Column("next_attempt_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("last_error", Text),
        Column("published_at", DateTime(timezone=True)),
        *lease_columns(),
        Index(
            "outbox_dispatch_pending",
            "aggregate_id",
            "message_pk",
            postgresql_where=text("state = 'pending'"),
        ),
    )
    inbox = Table(
        "inbox_receipts",
        metadata,
        Column("consumer", Text, nullable=False),
        Column("message_id", Text, nullable=False),
        Column("body_sha256", Text, nullable=False),
        Column("received_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        PrimaryKeyConstraint("consumer", "message_id"),
    )
    receipts = Table(
        "command_receipts",
        metadata,
        Column("command_id", Text, primary_key=True),
        Column("message_type", Text, nullable=False),
        Column("fingerprint", Text, nullable=False),
        Column("outcome", LargeBinary, nullable=False),  # serialized metallo.common.v1.Outcome
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    )
    return {
        "outbox_messages": messages,
        "outbox_dispatch": dispatch,
        "inbox_receipts": inbox,
        "command_receipts": receipts,
    }


_standalone = MetaData()
TABLES = add_messaging_tables(_standalone)
outbox_messages = TABLES["outbox_messages"]
outbox_dispatch = TABLES["outbox_dispatch"]
inbox_receipts = TABLES["inbox_receipts"]
command_receipts = TABLES["command_receipts"]


def create_messaging_tables(op) -> None:
    """Create the messaging tables from an Alembic revision's ``upgrade()``."""
    bind = op.get_bind()
    _standalone.create_all(bind, tables=list(TABLES.values()))


def drop_messaging_tables(op) -> None:
    """Drop the messaging tables from an Alembic revision's ``downgrade()``."""
    bind = op.get_bind()
    _standalone.drop_all(bind, tables=list(TABLES.values()))
