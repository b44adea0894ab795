"""Attempts Site Coordination knows have ended

An Attempt ends with a result that ends it, or when a later Attempt of its Run is
appended (a retry: one Attempt of a Run at a time). Its row here is written with the
revocation of its outstanding repository grants; the lab Git server refuses a grant
of an Attempt listed here, and issuing one is refused. ``site_commands_run`` finds a
Run's earlier Attempts.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ended_attempts",
        sa.Column("attempt_id", sa.Text, primary_key=True),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("noticed_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )
    op.create_index("site_commands_run", "site_commands", ["run_id", "attempt_number"])


def downgrade() -> None:
    op.drop_index("site_commands_run", table_name="site_commands")
    op.drop_table("ended_attempts")
