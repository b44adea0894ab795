"""The append-only audit of decisions (docs/operators.md, Audit): the record and
its table (:mod:`~metallo.audit.records`), redaction (:mod:`~metallo.audit.redaction`),
what a service audits of its commands (:mod:`~metallo.audit.trail`) and the
``ListAuditRecords`` answer (:mod:`~metallo.audit.query`)."""

from metallo.audit.records import (
    ACCEPTED,
    DRY_RUN,
    REFUSED,
    AuditEntry,
    add_audit_table,
    append,
    append_only_ddl,
    audit_records,
    create_audit_table,
    drop_audit_table,
)
from metallo.audit.redaction import REDACTED, redact, redact_text, request_summary
from metallo.audit.trail import DRY_RUN_ALLOWED, AuditTrail, affected_ids

__all__ = [
    "ACCEPTED", "DRY_RUN", "DRY_RUN_ALLOWED", "REDACTED", "REFUSED", "AuditEntry", "AuditTrail",
    "add_audit_table",
    "affected_ids", "append", "append_only_ddl", "audit_records", "create_audit_table",
    "drop_audit_table", "redact", "redact_text", "request_summary",
]
