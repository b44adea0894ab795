"""Lost Attempts, waiting reasons and native waits (docs/runs.md)

- ``runs.retry_on_lost``: the action's ``retry.onLost`` — a lost Attempt is retried
  only when it is true;
- ``runs.waiting_reason`` / ``runs.waiting_command_id``: the Site's deferral code of
  the Run's pending command (``SiteProgressReported``) or Execution Core's own
  waiting code, and the command it was reported for (its result clears it);
- ``runs.native_wait`` / ``runs.native_stage``: the native-wait code and the stage
  of the latest observation;
- ``attempts.lost_marked_at`` / ``lost_marked_by``: an operator's ``mark-lost``;
- ``run_decisions``: the append-only audit of operators' reconciliation decisions
  (a trigger refuses UPDATE and DELETE).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs",
        sa.Column("retry_on_lost", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.add_column("runs", sa.Column("waiting_reason", sa.Text(), server_default="", nullable=False))
    op.add_column("runs", sa.Column("waiting_command_id", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("native_wait", sa.Text(), server_default="", nullable=False))
    op.add_column("runs", sa.Column("native_stage", sa.Text(), server_default="", nullable=False))
    op.add_column("attempts", sa.Column("lost_marked_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("attempts", sa.Column("lost_marked_by", sa.Text(), server_default="", nullable=False))
    op.create_table(
        "run_decisions",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column("command_id", sa.Text(), nullable=False, unique=True),
        sa.Column("run_id", sa.Text(), sa.ForeignKey("runs.run_id"), nullable=False),
        sa.Column("attempt_id", sa.Text(), sa.ForeignKey("attempts.attempt_id"), nullable=False),
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("evidence", JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("run_decisions_by_run", "run_decisions", ["run_id", "id"])
    op.execute(
        """
CREATE FUNCTION run_decisions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run_decisions is append-only';
END
$$
"""
    )
    op.execute(
        "CREATE TRIGGER run_decisions_append_only BEFORE UPDATE OR DELETE ON run_decisions "
        "FOR EACH ROW EXECUTE FUNCTION run_decisions_append_only()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER run_decisions_append_only ON run_decisions")
    op.execute("DROP FUNCTION run_decisions_append_only()")
    op.drop_index("run_decisions_by_run", table_name="run_decisions")
    op.drop_table("run_decisions")
    op.drop_column("attempts", "lost_marked_by")
    op.drop_column("attempts", "lost_marked_at")
    for name in ("native_stage", "native_wait", "waiting_command_id", "waiting_reason", "retry_on_lost"):
        op.drop_column("runs", name)
