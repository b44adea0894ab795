"""Draining Sites (docs/operators.md, Draining a Site)

- ``site_drains``: one row per Site an operator is draining; planning gives such
  a Site no new Attempts while accepted work on it goes on.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "site_drains",
        sa.Column("site_id", sa.Text(), primary_key=True),
        sa.Column("drained_by", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("drained_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
    )


def downgrade() -> None:
    op.drop_table("site_drains")
