"""What Execution Core audits (docs/operators.md, Audit): its member and operator
commands, each recorded in the transaction that decides it, and ``ListAuditRecords``
over its own ``audit_records``."""

from __future__ import annotations

from execution_core.adaptors.governance_authority import GovernanceAuthority
from execution_core.application.ports import AuthorityUnavailable
from metallo.audit import AuditTrail
from metallo.audit.query import governed_reader, serve_audit_query
from metallo.execution_core.v1 import execution_core_pb2 as pb

TRAIL = AuditTrail("execution_core", {
    pb.LaunchRun: "run.launch",
    pb.RerunRun: "run.rerun",
    pb.CancelRun: "run.cancel",
    pb.ReconcileRun: "run.reconcile",
    pb.ReadRunLog: "run.read-log",
    pb.DrainSite: "site.drain",
    pb.ResumeSite: "site.resume",
})


def register_audit_query(server, authority: GovernanceAuthority) -> None:
    """Serve ``ListAuditRecords`` on ``server`` (``audit.read`` or operator ``platform.read``)."""
    serve_audit_query(server, pb.ListAuditRecords,
                      governed_reader(authority.may_read_audit, AuthorityUnavailable))
