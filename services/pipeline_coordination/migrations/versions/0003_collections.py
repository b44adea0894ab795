"""Collections: a step's shape and children (ADR 0031).

- ``pipeline_steps``: ``collection`` (the immutable shape, NULL for a plain
  step), ``collection_id`` (unique when set), the member's cancel, and the
  array decision.
- ``collection_items``: one row per child, keyed by (pipeline_id, step_index,
  item_index), with its parameter values and its Run.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("pipeline_steps", sa.Column("collection", JSONB, nullable=True))
    op.add_column("pipeline_steps", sa.Column("collection_id", sa.Text, nullable=False, server_default=""))
    op.add_column("pipeline_steps", sa.Column("cancelled_by", sa.Text, nullable=False, server_default=""))
    op.add_column("pipeline_steps", sa.Column("cancel_reason", sa.Text, nullable=False, server_default=""))
    op.add_column("pipeline_steps", sa.Column("array_decision", sa.Text, nullable=False, server_default=""))
    op.create_index("pipeline_steps_collection", "pipeline_steps", ["collection_id"], unique=True,
                    postgresql_where=sa.text("collection_id <> ''"))
    op.create_table(
        "collection_items",
        sa.Column("pipeline_id", sa.Text, nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("item_index", sa.Integer, nullable=False),
        sa.Column("parameters", JSONB, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False, server_default=""),
        sa.Column("launch_command_id", sa.Text, nullable=False, server_default=""),
        sa.Column("run_outcome", sa.Text, nullable=False, server_default=""),
        sa.Column("reason_code", sa.Text, nullable=False, server_default=""),
        sa.Column("message", sa.Text, nullable=False, server_default=""),
        sa.Column("output_commit", sa.Text, nullable=False, server_default=""),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("cancel_refused", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("observed_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("pipeline_id", "step_index", "item_index"),
        sa.ForeignKeyConstraint(["pipeline_id", "step_index"],
                                ["pipeline_steps.pipeline_id", "pipeline_steps.step_index"]),
    )


def downgrade() -> None:
    op.drop_table("collection_items")
    op.drop_index("pipeline_steps_collection", table_name="pipeline_steps")
    for column in ("array_decision", "cancel_reason", "cancelled_by", "collection_id", "collection"):
        op.drop_column("pipeline_steps", column)
