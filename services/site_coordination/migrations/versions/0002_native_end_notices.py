"""The first native end notice of each Attempt

A Site Runtime tells the edge, best effort, when it sees an Attempt's native work
end (``POST /v1/attempts/{attempt_id}/native-end``). The first notice of an Attempt
inserts its row and publishes ``SiteNativeEndNoticed`` in the same transaction;
a repeat finds the row and publishes nothing. A hint, never evidence (ADR 0016).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "native_end_notices",
        sa.Column("attempt_id", sa.Text, primary_key=True),
        sa.Column("site_id", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("noticed_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )


def downgrade() -> None:
    op.drop_table("native_end_notices")
