"""Pipelines, their steps and the messaging tables.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

from metallo.messaging.schema import create_messaging_tables, drop_messaging_tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_now = sa.text("now()")


def upgrade() -> None:
    create_messaging_tables(op)
    op.create_table(
        "pipelines",
        sa.Column("pipeline_id", sa.Text, primary_key=True),
        sa.Column("seq", sa.BigInteger, sa.Identity(always=True), nullable=False, unique=True),
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("initiating_member", sa.Text, nullable=False),
        sa.Column("repository_url", sa.Text, nullable=False),
        sa.Column("branch", sa.Text, nullable=False),
        sa.Column("requested_actions", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("desired_state", sa.Text, nullable=False, server_default="run"),
        sa.Column("prepared_commit", sa.Text, nullable=False, server_default=""),
        sa.Column("failed_step", sa.Integer, nullable=False, server_default="0"),
        sa.Column("reason_code", sa.Text, nullable=False, server_default=""),
        sa.Column("message", sa.Text, nullable=False, server_default=""),
        sa.Column("stopped_by", sa.Text, nullable=False, server_default=""),
        sa.Column("stop_reason", sa.Text, nullable=False, server_default=""),
        sa.Column("start_command_id", sa.Text, nullable=False),
        sa.Column("retries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text, nullable=False, server_default=""),
        sa.Column("request_round", sa.Integer, nullable=False, server_default="0"),
        sa.Column("active", sa.Boolean, nullable=False, server_default=sa.text("true")),
        sa.Column("next_wake_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("wake_seq", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("version", sa.BigInteger, nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("lease_owner", sa.Text),
        sa.Column("lease_token", UUID(as_uuid=True)),
        sa.Column("lease_generation", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True)),
    )
    op.create_index("pipelines_due", "pipelines", ["next_wake_at"], postgresql_where=sa.text("active"))
    op.create_index("pipelines_project_seq", "pipelines", ["project", "seq"])
    op.create_table(
        "pipeline_steps",
        sa.Column("pipeline_id", sa.Text, sa.ForeignKey("pipelines.pipeline_id"), nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("workload_id", sa.Text, nullable=False),
        sa.Column("prepared_revision", sa.BigInteger, nullable=False),
        sa.Column("revision", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("family", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("service_kind", sa.Text, nullable=False, server_default=""),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("pinned_commit", sa.Text, nullable=False, server_default=""),
        sa.Column("run_id", sa.Text, nullable=False, server_default=""),
        sa.Column("launch_attempt", sa.Integer, nullable=False, server_default="1"),
        sa.Column("launch_command_id", sa.Text, nullable=False, server_default=""),
        sa.Column("run_outcome", sa.Text, nullable=False, server_default=""),
        sa.Column("reason_code", sa.Text, nullable=False, server_default=""),
        sa.Column("message", sa.Text, nullable=False, server_default=""),
        sa.Column("output_commit", sa.Text, nullable=False, server_default=""),
        sa.Column("endpoint", sa.Text, nullable=False, server_default=""),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("cancel_refused", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("observed_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("pipeline_id", "step_index"),
    )


def downgrade() -> None:
    op.drop_table("pipeline_steps")
    op.drop_index("pipelines_project_seq", table_name="pipelines")
    op.drop_index("pipelines_due", table_name="pipelines")
    op.drop_table("pipelines")
    drop_messaging_tables(op)
