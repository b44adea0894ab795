"""PostgreSQL tables of Execution Core (database ``metallo_execution_core``).

- ``runs``: one row per accepted launch — the request, the initiating member,
  the planning verdict, the immutable execution specification and target, the
  state dimensions (seed 002 §9.2), cancellation, and the fenced lease used by
  the launch worker (phase ``accepted``) and the Run Supervisor (later phases);
- ``attempts``: one row per Attempt with its material digest and native facts;
- ``site_commands``: every Site command, persisted before it is dispatched,
  with the result Site Coordination recorded for it;
- ``run_transitions``: each change of a Run's state dimensions, with the Run's
  version, written in the transaction that made it (seed 002 §9.2);
- ``run_decisions``: operators' reconciliation decisions (``mark-lost``), append-only;
- ``site_drains``: Sites an operator is draining (planning gives them no new
  Attempts; ``docs/operators.md``), one row per draining Site;
- ``log_reads``: one row per private Run log read with its ``read-log`` Site
  command id, its deadline and, once the Site answered, the text (seed 001);
- the messaging tables (outbox, inbox, command receipts).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from metallo.audit.records import add_audit_table
from metallo.messaging.schema import add_messaging_tables
from metallo.persistence.leases import lease_columns

metadata = MetaData()

#: NOTIFY channel of the ``runs_due_notify`` trigger (migration 0004): a Run became due.
RUNS_DUE_CHANNEL = "execution_core_runs_due"
# The payloads of RUNS_DUE_CHANNEL (migration 0006): which worker the due Run concerns.
RUNS_DUE_PLAN = "plan"
RUNS_DUE_SUPERVISE = "supervise"
add_messaging_tables(metadata)
add_audit_table(metadata)  # append-only decisions (docs/operators.md, Audit)


def _now_column(name: str, nullable: bool = False) -> Column:
    return Column(
        name,
        DateTime(timezone=True),
        nullable=nullable,
        server_default=None if nullable else func.now(),
    )


runs = Table(
    "runs",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("project", Text, nullable=False),
    Column("workload_id", Text, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("initiating_member", Text, nullable=False),
    Column("launch_command_id", Text, nullable=False, unique=True),
    Column("launch_key", Text),
    Column("labels", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("repository_commit", Text, nullable=False, server_default=""),
    Column("rerun_of", Text, nullable=False, server_default=""),  # lineage (RerunRun)
    # A collection child's values (LaunchRun.parameters): METALLO_PARAM_<NAME> at the Site.
    Column("parameters", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Planned execution specification and target (immutable once planned).
    Column("action", Text, nullable=False, server_default=""),
    Column("action_type", Text, nullable=False, server_default=""),
    Column("environment", Text, nullable=False, server_default=""),
    Column("family", Text, nullable=False, server_default=""),
    Column("service_kind", Text, nullable=False, server_default=""),
    Column("site_id", Text, nullable=False, server_default=""),
    Column("spec", JSONB),
    Column("spec_digest", Text, nullable=False, server_default=""),
    Column("repositories", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("material", JSONB),  # prepare/apply payload without deadline
    Column("material_digest", Text, nullable=False, server_default=""),
    Column("max_attempts", Integer, nullable=False, server_default="1"),
    Column("backoff_seconds", Float, nullable=False, server_default="0"),
    Column("retry_on_lost", Boolean, nullable=False, server_default=text("false")),
    # State dimensions (seed 002 §9.2).
    Column("desired_state", Text, nullable=False, server_default="run"),
    Column("cancel_origin", Text, nullable=False, server_default=""),
    Column("cancel_reason", Text, nullable=False, server_default=""),
    Column("cancelled_by", Text, nullable=False, server_default=""),
    Column("cancel_command_id", Text),
    _now_column("cancel_requested_at", nullable=True),
    Column("phase", Text, nullable=False, server_default="accepted"),
    Column("native_state", Text, nullable=False, server_default=""),
    Column("observation_phase", Text, nullable=False, server_default=""),
    Column("observation_confidence", Text, nullable=False, server_default="none"),
    Column("exit", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("outcome", Text, nullable=False, server_default=""),
    Column("reason_code", Text, nullable=False, server_default=""),
    Column("output_commit", Text, nullable=False, server_default=""),
    Column("endpoint", Text, nullable=False, server_default=""),
    # Why it waits now (migration 0010): a deferral code and the command it holds.
    Column("waiting_reason", Text, nullable=False, server_default=""),
    Column("waiting_command_id", Text),
    Column("native_wait", Text, nullable=False, server_default=""),
    Column("native_stage", Text, nullable=False, server_default=""),
    Column("current_attempt_id", Text),
    Column("attempt_count", Integer, nullable=False, server_default="0"),
    Column("started", Boolean, nullable=False, server_default=text("false")),
    # Planning retries (seed 004 §3D: a temporary failure keeps a durable retry time).
    Column("planning_tries", Integer, nullable=False, server_default="0"),
    Column("planning_wait_code", Text, nullable=False, server_default=""),
    Column("planning_error", Text, nullable=False, server_default=""),
    # A collection child's array group (migration 0015) and how it was started.
    Column("array_group_id", Text, nullable=False, server_default=""),
    Column("array_start", Text, nullable=False, server_default=""),
    # Supervisor scheduling on PostgreSQL's clock.
    _now_column("next_wake_at"),
    _now_column("retry_at", nullable=True),
    _now_column("accepted_at"),
    _now_column("planned_at", nullable=True),
    _now_column("started_at", nullable=True),
    _now_column("ended_at", nullable=True),
    _now_column("updated_at"),
    Column("version", BigInteger, nullable=False, server_default="1"),
    *lease_columns(),
    Index("runs_due", "next_wake_at", postgresql_where=text("phase <> 'terminal'")),
    Index("runs_project_listing", "project", "accepted_at", "run_id"),
    Index(
        "runs_launch_key",
        "project",
        "launch_key",
        unique=True,
        postgresql_where=text("launch_key IS NOT NULL"),
    ),
)

attempts = Table(
    "attempts",
    metadata,
    Column("attempt_id", Text, primary_key=True),
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("state", Text, nullable=False, server_default="pending"),
    Column("material_digest", Text, nullable=False),
    Column("native_jobs", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("native_state", Text, nullable=False, server_default=""),
    Column("observation_phase", Text, nullable=False, server_default=""),
    Column("exit", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("reason_code", Text, nullable=False, server_default=""),
    _now_column("created_at"),
    Column("dispatch_deadline", DateTime(timezone=True), nullable=False),
    _now_column("started_at", nullable=True),
    _now_column("ended_at", nullable=True),
    # ADR 0016: when the Site Runtime's end notice arrived (a hint, not evidence).
    Column("native_end_noticed_at", DateTime(timezone=True), nullable=True),
    # ... and the seq of the Attempt's newest command then (the lifecycle's marker).
    Column("native_end_noticed_after_seq", BigInteger, nullable=True),
    # An operator's mark-lost (run_decisions holds the audit record).
    Column("lost_marked_at", DateTime(timezone=True), nullable=True),
    Column("lost_marked_by", Text, nullable=False, server_default=""),
    UniqueConstraint("run_id", "number", name="attempts_run_number"),
)

run_decisions = Table(
    "run_decisions",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("command_id", Text, nullable=False, unique=True),
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("attempt_id", Text, ForeignKey("attempts.attempt_id"), nullable=False),
    Column("project", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("decision", Text, nullable=False),
    Column("reason", Text, nullable=False, server_default=""),
    Column("evidence", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    _now_column("at"),
    Index("run_decisions_by_run", "run_id", "id"),
)

site_commands = Table(
    "site_commands",
    metadata,
    Column("seq", BigInteger, Identity(always=True), nullable=False, unique=True),
    Column("command_id", Text, primary_key=True),
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("attempt_id", Text, ForeignKey("attempts.attempt_id"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("site_id", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    _now_column("created_at"),
    Column("sequence", BigInteger),  # the Site stream's number, once its result is recorded
    Column("outcome", Text),  # succeeded | refused, once the result is recorded
    Column("code", Text),
    Column("result", JSONB),
    _now_column("result_at", nullable=True),
    # A child's start recorded from its group's start-array result (never sent itself).
    Column("relayed_by", Text, nullable=True),
    # A command is decided once: one prepare/start/cancel/… per Attempt, numbered observes.
    UniqueConstraint("attempt_id", "kind", "ordinal", name="site_commands_once"),
    Index("site_commands_by_attempt", "attempt_id", "seq"),
)

run_transitions = Table(
    "run_transitions",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("phase", Text, nullable=False),
    Column("desired_state", Text, nullable=False),
    Column("observation_phase", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("reason_code", Text, nullable=False),
    Column("attempt_number", Integer, nullable=False),
    _now_column("at"),
    # One entry per Run version: a replayed write can never add a second one.
    UniqueConstraint("run_id", "version", name="run_transitions_once"),
)

log_reads = Table(
    "log_reads",
    metadata,
    Column("read_id", Text, primary_key=True),
    Column("command_id", Text, nullable=False, unique=True),  # the read-log Site command
    Column("project", Text, nullable=False),
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("attempt_id", Text, ForeignKey("attempts.attempt_id"), nullable=False),
    Column("attempt_number", Integer, nullable=False),
    Column("stage", Text, nullable=False),
    Column("max_bytes", BigInteger, nullable=False),
    Column("viewer", Text, nullable=False),
    Column("site_id", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("state", Text, nullable=False, server_default="pending"),
    Column("text", Text, nullable=False, server_default=""),
    Column("truncated", Boolean, nullable=False, server_default=text("false")),
    Column("reason_code", Text, nullable=False, server_default=""),
    Column("message", Text, nullable=False, server_default=""),
    _now_column("created_at"),
    Column("deadline_at", DateTime(timezone=True), nullable=False),
    _now_column("answered_at", nullable=True),
    # Bytes of the Site's log (migration 0007); NULL for a tail read / an older Runtime.
    Column("requested_offset", BigInteger, nullable=True),
    Column("text_offset", BigInteger, nullable=True),
    Column("next_offset", BigInteger, nullable=True),
    Column("log_size", BigInteger, nullable=True),
    Index("log_reads_created_at", "created_at"),
)

array_groups = Table(
    "array_groups",
    metadata,
    Column("group_id", Text, primary_key=True),
    Column("project", Text, nullable=False),
    Column("size", Integer, nullable=False),
    Column("max_active", Integer, nullable=False),
    Column("mode", Text, nullable=False),  # prefer | require
    Column("state", Text, nullable=False, server_default="forming"),
    Column("site_id", Text, nullable=False, server_default=""),
    Column("environment", Text, nullable=False, server_default=""),
    Column("prepared", Integer, nullable=False, server_default="0"),
    Column("dropped", Integer, nullable=False, server_default="0"),
    # Children started on their own after a fallback that hold a maxActive slot now.
    Column("individual_active", Integer, nullable=False, server_default="0"),
    Column("deadline", DateTime(timezone=True), nullable=False),
    Column("command_id", Text, nullable=True),  # the start-array command, once dispatched
    Column("reason", Text, nullable=False, server_default=""),
    _now_column("created_at"),
    _now_column("settled_at", nullable=True),
)

array_members = Table(
    "array_members",
    metadata,
    Column("group_id", Text, ForeignKey("array_groups.group_id"), nullable=False),
    Column("index", Integer, nullable=False),
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False, unique=True),
    Column("attempt_id", Text, nullable=True, unique=True),
    Column("attempt_number", Integer, nullable=True),
    Column("slot", Text, nullable=False, server_default=""),  # "" | held | done (maxActive slot)
    PrimaryKeyConstraint("group_id", "index", name="array_members_pkey"),
)

site_drains = Table(
    "site_drains",
    metadata,
    Column("site_id", Text, primary_key=True),
    Column("drained_by", Text, nullable=False),
    Column("reason", Text, nullable=False, server_default=""),
    _now_column("drained_at"),
)
