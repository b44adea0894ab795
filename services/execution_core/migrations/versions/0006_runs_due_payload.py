"""The runs-due NOTIFY names the worker it concerns

Trigger 0004 sent an empty payload, so every due Run woke both the launch worker
and the Run Supervisor, and the one it did not concern spent a claim transaction
finding nothing (a burst of 100 launches cost about four idle planning claims per Run).
The payload is now ``plan`` for an ``accepted`` Run and ``supervise`` for a planned
one; the listener (``execution_core.adaptors.service``) wakes only that worker and
still wakes both on any other payload. PostgreSQL folds equal notifications of one
transaction, so a transaction making many Runs due still sends at most two.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

CHANNEL = "execution_core_runs_due"


def _function(payload_sql: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION runs_due_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.phase <> 'terminal' AND NEW.next_wake_at <= now() THEN
        PERFORM pg_notify('{CHANNEL}', {payload_sql});
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.execute(
        _function("CASE WHEN NEW.phase = 'accepted' THEN 'plan' ELSE 'supervise' END")
    )


def downgrade() -> None:
    op.execute(_function("''"))
