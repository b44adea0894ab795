"""Execution Core: runs, attempts, site commands, messaging tables

Revision ID: 0001
Revises:
Create Date: 2026-11-29 10:55:20.398514
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from metallo.messaging.schema import create_messaging_tables, drop_messaging_tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_messaging_tables(op)
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("workload_id", sa.Text(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("initiating_member", sa.Text(), nullable=False),
        sa.Column("launch_command_id", sa.Text(), nullable=False),
        sa.Column("launch_key", sa.Text(), nullable=True),
        sa.Column(
            "labels",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("repository_commit", sa.Text(), server_default="", nullable=False),
        sa.Column("action", sa.Text(), server_default="", nullable=False),
        sa.Column("action_type", sa.Text(), server_default="", nullable=False),
        sa.Column("environment", sa.Text(), server_default="", nullable=False),
        sa.Column("family", sa.Text(), server_default="", nullable=False),
        sa.Column("service_kind", sa.Text(), server_default="", nullable=False),
        sa.Column("site_id", sa.Text(), server_default="", nullable=False),
        sa.Column("spec", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("spec_digest", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "repositories",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("material", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("material_digest", sa.Text(), server_default="", nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default="1", nullable=False),
        sa.Column("backoff_seconds", sa.Float(), server_default="0", nullable=False),
        sa.Column("desired_state", sa.Text(), server_default="run", nullable=False),
        sa.Column("cancel_origin", sa.Text(), server_default="", nullable=False),
        sa.Column("cancel_reason", sa.Text(), server_default="", nullable=False),
        sa.Column("cancelled_by", sa.Text(), server_default="", nullable=False),
        sa.Column("cancel_command_id", sa.Text(), nullable=True),
        sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("phase", sa.Text(), server_default="accepted", nullable=False),
        sa.Column("native_state", sa.Text(), server_default="", nullable=False),
        sa.Column("observation_phase", sa.Text(), server_default="", nullable=False),
        sa.Column("observation_confidence", sa.Text(), server_default="none", nullable=False),
        sa.Column(
            "exit",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("outcome", sa.Text(), server_default="", nullable=False),
        sa.Column("reason_code", sa.Text(), server_default="", nullable=False),
        sa.Column("output_commit", sa.Text(), server_default="", nullable=False),
        sa.Column("endpoint", sa.Text(), server_default="", nullable=False),
        sa.Column("current_attempt_id", sa.Text(), nullable=True),
        sa.Column("attempt_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("started", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("planning_tries", sa.Integer(), server_default="0", nullable=False),
        sa.Column("planning_wait_code", sa.Text(), server_default="", nullable=False),
        sa.Column("planning_error", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "next_wake_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "accepted_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("planned_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_token", sa.UUID(), nullable=True),
        sa.Column("lease_generation", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("run_id"),
        sa.UniqueConstraint("launch_command_id"),
    )
    op.create_index(
        "runs_due",
        "runs",
        ["next_wake_at"],
        unique=False,
        postgresql_where=sa.text("phase <> 'terminal'"),
    )
    op.create_index(
        "runs_launch_key",
        "runs",
        ["project", "launch_key"],
        unique=True,
        postgresql_where=sa.text("launch_key IS NOT NULL"),
    )
    op.create_index(
        "runs_project_listing", "runs", ["project", "accepted_at", "run_id"], unique=False
    )
    op.create_table(
        "attempts",
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), server_default="pending", nullable=False),
        sa.Column("material_digest", sa.Text(), nullable=False),
        sa.Column(
            "native_jobs",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("native_state", sa.Text(), server_default="", nullable=False),
        sa.Column("observation_phase", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "exit",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("reason_code", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("dispatch_deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.run_id"],
        ),
        sa.PrimaryKeyConstraint("attempt_id"),
        sa.UniqueConstraint("run_id", "number", name="attempts_run_number"),
    )
    op.create_table(
        "site_commands",
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("command_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("site_id", sa.Text(), nullable=False),
        sa.Column("environment", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("sequence", sa.BigInteger(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("code", sa.Text(), nullable=True),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("result_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["attempt_id"],
            ["attempts.attempt_id"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.run_id"],
        ),
        sa.PrimaryKeyConstraint("command_id"),
        sa.UniqueConstraint("attempt_id", "kind", "ordinal", name="site_commands_once"),
        sa.UniqueConstraint("seq"),
    )
    op.create_index(
        "site_commands_by_attempt", "site_commands", ["attempt_id", "seq"], unique=False
    )


def downgrade() -> None:
    op.drop_index("site_commands_by_attempt", table_name="site_commands")
    op.drop_table("site_commands")
    op.drop_table("attempts")
    op.drop_index("runs_project_listing", table_name="runs")
    op.drop_index(
        "runs_launch_key", table_name="runs", postgresql_where=sa.text("launch_key IS NOT NULL")
    )
    op.drop_index("runs_due", table_name="runs", postgresql_where=sa.text("phase <> 'terminal'"))
    op.drop_table("runs")
    drop_messaging_tables(op)
