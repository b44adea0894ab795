"""Workloads, immutable revisions and the messaging tables.

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
        "workloads",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("seq", sa.BigInteger, sa.Identity(always=True), nullable=False, unique=True),
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("repository_url", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("action_type", sa.Text, nullable=False),
        sa.Column("family", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("service_kind", sa.Text),
        sa.Column("latest_revision", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.UniqueConstraint("project", "repository_url", "action", name="workloads_one_per_action"),
    )
    op.create_table(
        "workload_revisions",
        sa.Column("workload_id", sa.Text, sa.ForeignKey("workloads.id"), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("action_type", sa.Text, nullable=False),
        sa.Column("family", sa.Text, nullable=False),
        sa.Column("environment", sa.Text, nullable=False),
        sa.Column("service_kind", sa.Text),
        sa.Column("commit", sa.Text, nullable=False),
        sa.Column("branch", sa.Text, nullable=False),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("spec_digest", sa.Text, nullable=False),
        sa.Column("created_by", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
        sa.PrimaryKeyConstraint("workload_id", "revision"),
        sa.UniqueConstraint("workload_id", "spec_digest", name="workload_revisions_one_per_digest"),
        sa.CheckConstraint("revision >= 1", name="workload_revisions_positive"),
    )
    # Revisions are immutable: refuse UPDATE and DELETE at the database itself.
    op.execute(
        """
        CREATE FUNCTION workload_revisions_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          RAISE EXCEPTION 'workload revisions are immutable';
        END $$;
        """
    )
    op.execute(
        "CREATE TRIGGER workload_revisions_immutable BEFORE UPDATE OR DELETE ON workload_revisions "
        "FOR EACH ROW EXECUTE FUNCTION workload_revisions_immutable()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER workload_revisions_immutable ON workload_revisions")
    op.execute("DROP FUNCTION workload_revisions_immutable()")
    op.drop_table("workload_revisions")
    op.drop_table("workloads")
    drop_messaging_tables(op)
