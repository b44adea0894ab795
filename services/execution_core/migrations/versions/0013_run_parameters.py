"""A collection child's parameter values on its Run (docs/actions.md, Collections)

- ``runs.parameters``: name → value (LaunchRun.parameters); they reach the
  command only as METALLO_PARAM_<NAME> through the planned specification.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("parameters", JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False)
    )


def downgrade() -> None:
    op.drop_column("runs", "parameters")
