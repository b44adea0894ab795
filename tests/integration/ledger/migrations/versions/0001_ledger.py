"""Ledger test service: messaging tables, accounts and recorded effects."""

import sqlalchemy as sa
from alembic import op

from metallo.messaging.schema import create_messaging_tables, drop_messaging_tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_messaging_tables(op)
    op.create_table(
        "accounts",
        sa.Column("account", sa.Text, primary_key=True),
        sa.Column("balance", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "effects",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("consumer", sa.Text, nullable=False),
        sa.Column("account", sa.Text, nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("effects")
    op.drop_table("accounts")
    drop_messaging_tables(op)
