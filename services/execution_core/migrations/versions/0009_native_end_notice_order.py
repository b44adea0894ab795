"""Which observes answer a native end notice: by command order, not by the clock

With 0008 the lifecycle compared observes' ``created_at`` with
``native_end_noticed_at``: a database clock stepping back after a notice made every
later observe look older than the notice, and one was sent at every wake-up. Now the
notice also records the ``seq`` of the Attempt's newest command when it arrived, and
the next observe is due at once unless an observe with a higher ``seq`` exists
(ADR 0016). NULL: no notice (``native_end_noticed_at`` stays for the record; a
notice recorded before this revision is answered by the back-off alone).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "attempts", sa.Column("native_end_noticed_after_seq", sa.BigInteger(), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("attempts", "native_end_noticed_after_seq")
