"""Run lineage: ``rerun_of`` names the Run a RerunRun reran ("" for a first launch)

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("rerun_of", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("runs", "rerun_of")
