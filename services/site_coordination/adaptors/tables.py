"""Site Coordination's private database (``metallo_site_coordination``).

Streams and numbered commands with their results (seed 004 §4A), command grants
(§4B), progress reports, native end notices (ADR 0016), repository grants, read
permits (seed 001), ended Runs, the lab Git server's tokens, and the messaging tables (outbox,
inbox, command receipts).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    func,
)

from metallo.audit.records import add_audit_table
from metallo.messaging.schema import add_messaging_tables

metadata = MetaData()
add_messaging_tables(metadata)
add_audit_table(metadata)  # append-only decisions (docs/operators.md, Audit)

_now = func.now()

site_streams = Table(
    "site_streams", metadata,
    Column("site_id", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("last_sequence", BigInteger, nullable=False),
    # The last sequence whose result is recorded: results are recorded in order.
    Column("acknowledged_sequence", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint("site_id", "environment"),
)

site_commands = Table(
    "site_commands", metadata,
    Column("command_id", Text, primary_key=True),
    Column("site_id", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("kind", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("attempt_id", Text, nullable=False),
    Column("attempt_number", Integer, nullable=False),
    Column("payload_json", Text, nullable=False),
    Column("request_hash", Text, nullable=False),
    Column("appended_at", DateTime(timezone=True), nullable=False, server_default=_now),
    Column("first_delivered_at", DateTime(timezone=True), nullable=True),
    Column("delivery_count", Integer, nullable=False, server_default="0"),
    Column("result_json", Text, nullable=True),
    Column("result_recorded_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("site_id", "environment", "sequence", name="site_commands_stream_sequence"),
    Index("site_commands_attempt", "attempt_id"),
    Index("site_commands_run", "run_id", "attempt_number"),
)

command_grants = Table(
    "command_grants", metadata,
    Column("grant_id", Text, primary_key=True),
    Column("site_id", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("secret_sha256", Text, nullable=False, unique=True),
    Column("label", Text, nullable=False, server_default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)

progress_reports = Table(
    "progress_reports", metadata,
    Column("command_id", Text, nullable=False),
    Column("code", Text, nullable=False),
    Column("reported_at", DateTime(timezone=True), nullable=False, server_default=_now),
    PrimaryKeyConstraint("command_id", "code"),
)

# The first native end notice of each Attempt (ADR 0016): the hint is published once.
native_end_notices = Table(
    "native_end_notices", metadata,
    Column("attempt_id", Text, primary_key=True),
    Column("site_id", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("noticed_at", DateTime(timezone=True), nullable=False, server_default=_now),
)

repository_grants = Table(
    "repository_grants", metadata,
    Column("grant_id", Text, primary_key=True),
    Column("site_id", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("attempt_id", Text, nullable=False),
    Column("direction", Text, nullable=False),
    Column("repository_url", Text, nullable=False),
    Column("username", Text, nullable=False),
    Column("provider_ref", Text, nullable=False),
    Column("issued_by", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=_now),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
    Index("repository_grants_attempt", "attempt_id"),
    Index("repository_grants_run", "run_id"),
)

# Runs Execution Core said ended (RunCompleted): their repository grants are over.
ended_runs = Table(
    "ended_runs", metadata,
    Column("run_id", Text, primary_key=True),
    Column("outcome", Text, nullable=False),
    Column("noticed_at", DateTime(timezone=True), nullable=False, server_default=_now),
)

# Attempts Site Coordination knows have ended: a result that ends the Attempt, or a
# later Attempt of its Run appended (one Attempt of a Run at a time). Their repository
# grants are over.
ended_attempts = Table(
    "ended_attempts", metadata,
    Column("attempt_id", Text, primary_key=True),
    Column("run_id", Text, nullable=False),
    Column("reason", Text, nullable=False),  # result | superseded
    Column("noticed_at", DateTime(timezone=True), nullable=False, server_default=_now),
)

# The Attempts a start-array command submits (migration 0006): each counts as started
# once that command is delivered.
array_task_attempts = Table(
    "array_task_attempts", metadata,
    Column("attempt_id", Text, nullable=False),
    Column("command_id", Text, ForeignKey("site_commands.command_id"), nullable=False),
    PrimaryKeyConstraint("attempt_id", "command_id"),
)

read_permits = Table(
    "read_permits", metadata,
    Column("permit_id", Text, primary_key=True),
    Column("site_id", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("attempt_id", Text, nullable=False),
    Column("viewer", Text, nullable=False),
    Column("read_kind", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("max_bytes", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=_now),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

# The lab Git server's own credentials (the development Source Control adapter).
lab_git_tokens = Table(
    "lab_git_tokens", metadata,
    Column("username", Text, primary_key=True),
    Column("token_sha256", Text, nullable=False),
    Column("repository_path", Text, nullable=False),   # e.g. "demo.git"
    Column("access", Text, nullable=False),            # "read" | "write"
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=_now),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)
