"""Runs Site Coordination knows have ended

Execution Core's ``RunCompleted`` inserts the Run's row and revokes its
outstanding repository grants in the same transaction; the lab Git server refuses
a grant whose Run has a row here even if it was issued concurrently; issuing one
is refused. ``repository_grants_run`` finds a Run's grants.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ended_runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("noticed_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )
    op.create_index("repository_grants_run", "repository_grants", ["run_id"])


def downgrade() -> None:
    op.drop_index("repository_grants_run", table_name="repository_grants")
    op.drop_table("ended_runs")
