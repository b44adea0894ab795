"""Pipeline Coordination's PostgreSQL tables (database ``metallo_pipeline_coordination``).

- ``pipelines``: one row per Pipeline; the coordinator's claimable work row
  (fenced lease columns, ``active`` + ``next_wake_at``). ``wake_seq`` grows on
  every outside wake (an event, a stop) so a coordinator releasing the row never
  swallows a wake that arrived while it worked.
- ``pipeline_steps``: the steps, keyed by (pipeline_id, step_index), each with its
  ``needs`` and ``run_when`` (the immutable graph: inserted with the step, never updated).
- ``collection_items``: the children of a collection step, keyed by
  (pipeline_id, step_index, item_index), each with its parameter values and Run.
- the messaging tables (outbox, inbox receipts, command receipts).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from metallo.audit.records import add_audit_table
from metallo.messaging.schema import add_messaging_tables
from metallo.persistence.leases import lease_columns

metadata = MetaData()
add_messaging_tables(metadata)
add_audit_table(metadata)  # append-only decisions (docs/operators.md, Audit)

pipelines = Table(
    "pipelines",
    metadata,
    Column("pipeline_id", Text, primary_key=True),
    Column("seq", BigInteger, Identity(always=True), nullable=False, unique=True),
    Column("project", Text, nullable=False),
    Column("initiating_member", Text, nullable=False),
    Column("repository_url", Text, nullable=False),
    Column("branch", Text, nullable=False),
    Column("requested_actions", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("state", Text, nullable=False),
    Column("desired_state", Text, nullable=False, server_default="run"),
    Column("prepared_commit", Text, nullable=False, server_default=""),
    Column("failed_step", Integer, nullable=False, server_default="0"),
    Column("reason_code", Text, nullable=False, server_default=""),
    Column("message", Text, nullable=False, server_default=""),
    Column("stopped_by", Text, nullable=False, server_default=""),
    Column("stop_reason", Text, nullable=False, server_default=""),
    Column("start_command_id", Text, nullable=False),
    Column("retries", Integer, nullable=False, server_default="0"),
    Column("last_error", Text, nullable=False, server_default=""),
    Column("request_round", Integer, nullable=False, server_default="0"),
    Column("max_active", Integer, nullable=False, server_default="4"),
    Column("rerun_of", Text, nullable=False, server_default=""),
    Column("active", Boolean, nullable=False, server_default=text("true")),
    Column("next_wake_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("wake_seq", BigInteger, nullable=False, server_default="0"),
    Column("version", BigInteger, nullable=False, server_default="1"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("ended_at", DateTime(timezone=True)),
    *lease_columns(),
    Index("pipelines_due", "next_wake_at", postgresql_where=text("active")),
    Index("pipelines_project_seq", "project", "seq"),
)

pipeline_steps = Table(
    "pipeline_steps",
    metadata,
    Column("pipeline_id", Text, ForeignKey("pipelines.pipeline_id"), nullable=False),
    Column("step_index", Integer, nullable=False),
    Column("action", Text, nullable=False),
    Column("workload_id", Text, nullable=False),
    Column("prepared_revision", BigInteger, nullable=False),
    Column("revision", BigInteger, nullable=False, server_default="0"),
    Column("family", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("service_kind", Text, nullable=False, server_default=""),
    Column("state", Text, nullable=False),
    Column("pinned_commit", Text, nullable=False, server_default=""),
    Column("run_id", Text, nullable=False, server_default=""),
    Column("launch_attempt", Integer, nullable=False, server_default="1"),
    Column("launch_command_id", Text, nullable=False, server_default=""),
    Column("run_outcome", Text, nullable=False, server_default=""),
    Column("reason_code", Text, nullable=False, server_default=""),
    Column("message", Text, nullable=False, server_default=""),
    Column("output_commit", Text, nullable=False, server_default=""),
    Column("endpoint", Text, nullable=False, server_default=""),
    Column("cancel_requested", Boolean, nullable=False, server_default=text("false")),
    Column("cancel_refused", Boolean, nullable=False, server_default=text("false")),
    Column("started_at", DateTime(timezone=True)),
    Column("ended_at", DateTime(timezone=True)),
    Column("observed_at", DateTime(timezone=True)),
    # The graph, written once with the step (never updated): indices it needs, and when.
    Column("needs", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("run_when", Text, nullable=False, server_default="success"),
    Column("carried_from", Text, nullable=False, server_default=""),
    # A collection step (ADR 0031): its immutable shape, id, a member's cancel, the array decision.
    Column("collection", JSONB, nullable=True),
    Column("collection_id", Text, nullable=False, server_default=""),
    Column("cancelled_by", Text, nullable=False, server_default=""),
    Column("cancel_reason", Text, nullable=False, server_default=""),
    Column("array_decision", Text, nullable=False, server_default=""),
    PrimaryKeyConstraint("pipeline_id", "step_index"),
    Index("pipeline_steps_collection", "collection_id", unique=True, postgresql_where=text("collection_id <> ''")),
)

collection_items = Table(
    "collection_items",
    metadata,
    Column("pipeline_id", Text, nullable=False),
    Column("step_index", Integer, nullable=False),
    Column("item_index", Integer, nullable=False),
    Column("parameters", JSONB, nullable=False),
    Column("state", Text, nullable=False),
    Column("run_id", Text, nullable=False, server_default=""),
    Column("launch_command_id", Text, nullable=False, server_default=""),
    Column("run_outcome", Text, nullable=False, server_default=""),
    Column("reason_code", Text, nullable=False, server_default=""),
    Column("message", Text, nullable=False, server_default=""),
    Column("output_commit", Text, nullable=False, server_default=""),
    Column("cancel_requested", Boolean, nullable=False, server_default=text("false")),
    Column("cancel_refused", Boolean, nullable=False, server_default=text("false")),
    Column("started_at", DateTime(timezone=True)),
    Column("ended_at", DateTime(timezone=True)),
    Column("observed_at", DateTime(timezone=True)),
    # A rerun --failed child that kept its result: the Pipeline whose Run it is (written once).
    Column("carried_from", Text, nullable=False, server_default=""),
    PrimaryKeyConstraint("pipeline_id", "step_index", "item_index"),
    ForeignKeyConstraint(["pipeline_id", "step_index"], ["pipeline_steps.pipeline_id", "pipeline_steps.step_index"]),
)
