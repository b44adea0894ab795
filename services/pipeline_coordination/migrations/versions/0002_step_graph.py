"""The step graph (needs, when), max_active, and rerun lineage.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("pipelines", sa.Column("max_active", sa.Integer, nullable=False, server_default="4"))
    op.add_column("pipelines", sa.Column("rerun_of", sa.Text, nullable=False, server_default=""))
    # Steps saved before graphs ran in file order, each after the one before it.
    op.add_column("pipeline_steps", sa.Column("needs", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")))
    op.execute("UPDATE pipeline_steps SET needs = jsonb_build_array(step_index - 1) WHERE step_index > 1")
    op.add_column("pipeline_steps", sa.Column("run_when", sa.Text, nullable=False, server_default="success"))
    op.add_column("pipeline_steps", sa.Column("carried_from", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    for column in ("carried_from", "run_when", "needs"):
        op.drop_column("pipeline_steps", column)
    for column in ("rerun_of", "max_active"):
        op.drop_column("pipelines", column)
