"""Streams, numbered commands, results, grants, progress, repository grants, read
permits, lab Git tokens and the messaging tables.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

from metallo.messaging.schema import create_messaging_tables, drop_messaging_tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_now = sa.text("now()")


def upgrade() -> None:
    create_messaging_tables(op)
    op.create_table(
        "site_streams",
        sa.Column("site_id", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("last_sequence", sa.BigInteger, nullable=False),
        sa.Column("acknowledged_sequence", sa.BigInteger, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("site_id", "environment"),
    )
    op.create_table(
        "site_commands",
        sa.Column("command_id", sa.Text, primary_key=True),
        sa.Column("site_id", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("attempt_id", sa.Text, nullable=False),
        sa.Column("attempt_number", sa.Integer, nullable=False),
        sa.Column("payload_json", sa.Text, nullable=False),
        sa.Column("request_hash", sa.Text, nullable=False),
        sa.Column("appended_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("first_delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivery_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("result_json", sa.Text, nullable=True),
        sa.Column("result_recorded_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("site_id", "environment", "sequence",
                            name="site_commands_stream_sequence"),
    )
    op.create_index("site_commands_attempt", "site_commands", ["attempt_id"])
    op.create_table(
        "command_grants",
        sa.Column("grant_id", sa.Text, primary_key=True),
        sa.Column("site_id", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("secret_sha256", sa.Text, nullable=False, unique=True),
        sa.Column("label", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "progress_reports",
        sa.Column("command_id", sa.Text, nullable=False),
        sa.Column("code", sa.Text, nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.PrimaryKeyConstraint("command_id", "code"),
    )
    op.create_table(
        "repository_grants",
        sa.Column("grant_id", sa.Text, primary_key=True),
        sa.Column("site_id", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("attempt_id", sa.Text, nullable=False),
        sa.Column("direction", sa.Text, nullable=False),
        sa.Column("repository_url", sa.Text, nullable=False),
        sa.Column("username", sa.Text, nullable=False),
        sa.Column("provider_ref", sa.Text, nullable=False),
        sa.Column("issued_by", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("repository_grants_attempt", "repository_grants", ["attempt_id"])
    op.create_table(
        "read_permits",
        sa.Column("permit_id", sa.Text, primary_key=True),
        sa.Column("site_id", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("attempt_id", sa.Text, nullable=False),
        sa.Column("viewer", sa.Text, nullable=False),
        sa.Column("read_kind", sa.Text, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("max_bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "lab_git_tokens",
        sa.Column("username", sa.Text, primary_key=True),
        sa.Column("token_sha256", sa.Text, nullable=False),
        sa.Column("repository_path", sa.Text, nullable=False),
        sa.Column("access", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    for table in ("lab_git_tokens", "read_permits", "repository_grants", "progress_reports",
                  "command_grants", "site_commands", "site_streams"):
        op.drop_table(table)
    drop_messaging_tables(op)
