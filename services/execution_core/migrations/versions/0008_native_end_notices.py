"""When the Site Runtime noticed that an Attempt's native work ended

``SiteNativeEndNoticed`` (ADR 0016) is a hint: Execution Core records when it
arrived on the Attempt and makes the Attempt's next observe due at once instead of
at its back-off time. NULL: no notice (every Attempt before this revision, and
every Attempt of an executor that does not notice ends).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "attempts", sa.Column("native_end_noticed_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("attempts", "native_end_noticed_at")
