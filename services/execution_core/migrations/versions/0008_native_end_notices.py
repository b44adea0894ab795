"""When the Site Runtime noticed that an Attempt's native work ended

``SiteNativeEndNoticed`` (ADR 0016) is a hint: Execution Core records when it
arrived on the Attempt, and the ``seq`` of the Attempt's newest command then, and
makes the Attempt's next observe due at once unless an observe with a higher ``seq``
exists (command order, not clock readings: a clock stepping back must not make
every later observe look older than the notice). NULL: no notice (every Attempt
before this revision, and every Attempt of an executor that does not notice ends).

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
    op.add_column(
        "attempts", sa.Column("native_end_noticed_after_seq", sa.BigInteger(), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("attempts", "native_end_noticed_after_seq")
    op.drop_column("attempts", "native_end_noticed_at")
