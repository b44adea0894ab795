"""Log reads from an offset, and their retention

A reader follows a growing stage log by reading from the last answer's
``next_offset`` (``ReadRunLog.offset``; docs/runs.md, Following a log). Each read
records the offset it asked for and, once answered, where its text starts, where
the next read starts and the log's size, in bytes of the Site's log. All are NULL
for reads recorded before this revision and for answers of a Runtime that predates
offsets.

Following a log makes many small reads, so answered reads are now deleted after the
retention period (``created_at`` index for that delete).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COLUMNS = ("requested_offset", "text_offset", "next_offset", "log_size")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("log_reads", sa.Column(name, sa.BigInteger(), nullable=True))
    op.create_index("log_reads_created_at", "log_reads", ["created_at"])


def downgrade() -> None:
    op.drop_index("log_reads_created_at", table_name="log_reads")
    for name in COLUMNS:
        op.drop_column("log_reads", name)
