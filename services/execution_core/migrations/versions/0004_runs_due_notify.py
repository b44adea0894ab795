"""Wake the launch worker and the Run Supervisor when a Run becomes due

A trigger NOTIFYs ``execution_core_runs_due`` whenever a Run row is inserted, or
its ``next_wake_at`` is set, to a time already reached while the Run is not
terminal (a launch accepted, a planned Run, a recorded result, a cancellation).
PostgreSQL delivers the notification at commit and folds repeats within one
transaction, so the workers (``metallo.persistence.wakeups``) look at once instead
of after their idle poll. Being a trigger, no writer can forget it.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

CHANNEL = "execution_core_runs_due"


def upgrade() -> None:
    op.execute(
        f"""
CREATE FUNCTION runs_due_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.phase <> 'terminal' AND NEW.next_wake_at <= now() THEN
        PERFORM pg_notify('{CHANNEL}', '');
    END IF;
    RETURN NULL;
END
$$
"""
    )
    op.execute(
        "CREATE TRIGGER runs_due_notify AFTER INSERT OR UPDATE OF next_wake_at ON runs "
        "FOR EACH ROW EXECUTE FUNCTION runs_due_notify()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER runs_due_notify ON runs")
    op.execute("DROP FUNCTION runs_due_notify()")
