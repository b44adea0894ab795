"""The audit record: its shape, its table and the trigger that keeps it append-only.

Every service that decides requests keeps ``audit_records`` in its own database
(docs/operators.md, Audit) and appends one row per decision inside the deciding
transaction, so a decision and its record commit or roll back together. The
trigger of :func:`append_only_ddl` refuses every UPDATE, DELETE and TRUNCATE of
the table: a record, once committed, is never changed or removed by SQL.

A migration creates both with :func:`create_audit_table` (and drops them with
:func:`drop_audit_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Identity,
    Index,
    MetaData,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from metallo.audit.redaction import redact, redact_text

ACCEPTED = "accepted"
REFUSED = "refused"
#: A dry run of an audited command: it was asked and answered, and decided nothing.
DRY_RUN = "dry-run"
DECISIONS = (ACCEPTED, REFUSED, DRY_RUN)
#: Most affected ids one record keeps (each id at most 200 characters).
MAX_AFFECTED = 16


@dataclass(frozen=True)
class AuditEntry:
    """One decision to record.

    actor: member id acting ("" when none was named); principal: who sent the
    request (RabbitMQ user, Site edge grant id); project: "" for a platform-wide
    operator decision; action: stable name (``run.launch``); affected: ids the
    decision concerns; request_id: the command_id; decision: ``accepted``,
    ``refused`` with the refusal's ``code``, or ``dry-run`` (nothing decided); summary: the request's redacted fields
    (:func:`metallo.audit.redaction.request_summary`).
    """

    actor: str
    principal: str
    project: str
    action: str
    decision: str
    code: str = ""
    request_id: str = ""
    correlation_id: str = ""
    affected: Mapping[str, str] = field(default_factory=dict)
    summary: Mapping[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The ``audit_records`` values (bounded, redacted once more: a caller's summary
        or id never carries a secret into the table)."""
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, "
                             f"not {self.decision!r}")
        affected = {str(k)[:64]: redact_text(str(v)) for k, v in
                    list(self.affected.items())[:MAX_AFFECTED] if v}
        return {
            "actor": self.actor[:200], "principal": (self.principal or "")[:200],
            "project": self.project[:200], "action": self.action[:64],
            "affected": affected, "request_id": self.request_id[:200],
            "correlation_id": (self.correlation_id or "")[:200],
            "decision": self.decision, "code": self.code[:64],
            "summary": redact(dict(self.summary)),
        }


def add_audit_table(metadata: MetaData) -> Table:
    """Define ``audit_records`` on ``metadata`` and return it."""
    return Table(
        "audit_records",
        metadata,
        Column("seq", BigInteger, Identity(always=True), primary_key=True),
        Column("recorded_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("actor", Text, nullable=False),
        Column("principal", Text, nullable=False, server_default=""),
        Column("project", Text, nullable=False),
        Column("action", Text, nullable=False),
        Column("affected", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
        Column("request_id", Text, nullable=False, server_default=""),
        Column("correlation_id", Text, nullable=False, server_default=""),
        Column("decision", Text, nullable=False),
        Column("code", Text, nullable=False, server_default=""),
        Column("summary", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
        Index("audit_records_project_time", "project", "recorded_at", "seq"),
    )


_standalone = MetaData()
audit_records = add_audit_table(_standalone)

_FUNCTION = "audit_records_append_only"


def append_only_ddl(table: str = "audit_records") -> list[str]:
    """Statements creating the trigger that refuses UPDATE, DELETE and TRUNCATE of
    ``table`` (SQLSTATE 42501, insufficient privilege, naming the table)."""
    return [
        f"""CREATE OR REPLACE FUNCTION {_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit records are append-only: % of % refused', TG_OP, TG_TABLE_NAME
    USING ERRCODE = '42501';
END $$""",
        f"CREATE TRIGGER {table}_no_update_delete BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {_FUNCTION}()",
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTION}()",
    ]


def create_audit_table(op) -> None:
    """Create ``audit_records`` and its append-only trigger from an Alembic ``upgrade()``."""
    bind = op.get_bind()
    _standalone.create_all(bind, tables=[audit_records])
    for statement in append_only_ddl():
        op.execute(statement)


def drop_audit_table(op) -> None:
    """Drop ``audit_records``, its trigger and function from an Alembic ``downgrade()``."""
    op.execute("DROP TABLE IF EXISTS audit_records")
    op.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}()")


async def append(session: AsyncSession, entry: AuditEntry) -> None:
    """Append ``entry`` in the session's (the deciding) transaction."""
    await session.execute(audit_records.insert().values(**entry.row()))
