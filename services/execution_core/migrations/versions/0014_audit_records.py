"""Append-only audit records (docs/operators.md, Audit)

- ``audit_records``: one row per decision of this service, appended in the
  deciding transaction; a trigger refuses every UPDATE, DELETE and TRUNCATE.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

from metallo.audit.records import create_audit_table, drop_audit_table

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_audit_table(op)


def downgrade() -> None:
    drop_audit_table(op)
