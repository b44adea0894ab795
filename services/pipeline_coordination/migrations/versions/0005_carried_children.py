"""Collection children carried over by a rerun --failed (docs/pipelines.md, Rerunning).

- ``collection_items.carried_from``: the Pipeline whose Run a succeeded child
  of a rerun's collection is ("" for a child that runs in its own Pipeline).

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
    op.add_column("collection_items", sa.Column("carried_from", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("collection_items", "carried_from")
