"""Array groups: a collection's children started as one Slurm array (ADR 0032)

- ``array_groups``: one row per group (state, mode, size, max_active, the Site it
  was placed on, how many children are prepared or dropped, its one shared
  deadline, the start-array command once dispatched, the reason it is not one array,
  and how many children started on their own hold a maxActive slot);
- ``array_members``: the index ↔ Run / Attempt mapping, saved at acceptance
  (Run) and planning (Attempt), before any start-array command is sent, and each
  child's maxActive slot when it starts on its own (``held``, then ``done``);
- ``runs.array_group_id`` and ``runs.array_start`` (how the child was started);
- ``site_commands.relayed_by``: a child's ``start`` row that records its task of a
  group's start-array result (never sent to the Site itself).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "array_groups",
        sa.Column("group_id", sa.Text(), primary_key=True),
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("max_active", sa.Integer(), nullable=False),
        sa.Column("mode", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), server_default="forming", nullable=False),
        sa.Column("site_id", sa.Text(), server_default="", nullable=False),
        sa.Column("environment", sa.Text(), server_default="", nullable=False),
        sa.Column("prepared", sa.Integer(), server_default="0", nullable=False),
        sa.Column("dropped", sa.Integer(), server_default="0", nullable=False),
        sa.Column("individual_active", sa.Integer(), server_default="0", nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("command_id", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "array_members",
        sa.Column("group_id", sa.Text(), sa.ForeignKey("array_groups.group_id"), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Text(), sa.ForeignKey("runs.run_id"), nullable=False, unique=True),
        sa.Column("attempt_id", sa.Text(), nullable=True, unique=True),
        sa.Column("attempt_number", sa.Integer(), nullable=True),
        sa.Column("slot", sa.Text(), server_default="", nullable=False),
        sa.PrimaryKeyConstraint("group_id", "index", name="array_members_pkey"),
    )
    op.add_column("runs", sa.Column("array_group_id", sa.Text(), server_default="", nullable=False))
    op.add_column("runs", sa.Column("array_start", sa.Text(), server_default="", nullable=False))
    op.add_column("site_commands", sa.Column("relayed_by", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("site_commands", "relayed_by")
    op.drop_column("runs", "array_start")
    op.drop_column("runs", "array_group_id")
    op.drop_table("array_members")
    op.drop_table("array_groups")
