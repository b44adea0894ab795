"""The Attempts a start-array command submits (ADR 0032)

- ``array_task_attempts``: one row per task of a ``start-array`` command, written
  with its append; an Attempt whose start-array was delivered counts as submitted
  (its stage-out may cross the deadline, as a delivered ``start``'s does).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "array_task_attempts",
        sa.Column("attempt_id", sa.Text, nullable=False),
        sa.Column("command_id", sa.Text, sa.ForeignKey("site_commands.command_id"), nullable=False),
        sa.PrimaryKeyConstraint("attempt_id", "command_id"),
    )


def downgrade() -> None:
    op.drop_table("array_task_attempts")
