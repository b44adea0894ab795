"""A Run that ends wakes the oldest launch waiting for a concurrent-Run slot

A launch that found its Project's (or every eligible Site's) concurrent-Run limit
reached waits with a growing retry delay (up to 300 s). When a Run that held a slot
ends, this trigger sets ``next_wake_at`` of the oldest such waiting launch — of the
same Project, and the oldest of any Project (a Site's limit spans Projects) — to
now; trigger 0004 then NOTIFYs the launch worker, which plans it at once. First
come, first served; the retry delay stays the fallback.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
CREATE FUNCTION runs_wake_waiting_launch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET next_wake_at = now()
    WHERE run_id IN (
        (SELECT run_id FROM runs
         WHERE phase = 'accepted' AND planning_wait_code = 'concurrent-run-limit'
           AND next_wake_at > now() AND project = NEW.project
         ORDER BY accepted_at, run_id LIMIT 1)
        UNION
        (SELECT run_id FROM runs
         WHERE phase = 'accepted' AND planning_wait_code = 'concurrent-run-limit'
           AND next_wake_at > now()
         ORDER BY accepted_at, run_id LIMIT 1));
    RETURN NULL;
END
$$
"""
    )
    # Only a Run that held a slot frees one: a launch rejected while still
    # 'accepted' never counted (execution_core.adaptors.run_store.count_active).
    op.execute(
        "CREATE TRIGGER runs_wake_waiting_launch AFTER UPDATE OF phase ON runs FOR EACH ROW "
        "WHEN (NEW.phase = 'terminal' AND OLD.phase NOT IN ('terminal', 'accepted')) "
        "EXECUTE FUNCTION runs_wake_waiting_launch()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER runs_wake_waiting_launch ON runs")
    op.execute("DROP FUNCTION runs_wake_waiting_launch()")
