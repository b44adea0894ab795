"""What Execution Core audits (docs/operators.md, Audit): its member and operator
commands, each recorded in the transaction that decides it, and ``ListAuditRecords``
over its own ``audit_records``."""

from __future__ import annotations

from execution_core.adaptors.governance_authority import GovernanceAuthority
from execution_core.application.ports import AuthorityUnavailable
from execution_core.domain import reasons
from metallo.audit import DRY_RUN_ALLOWED, AuditTrail
from metallo.audit.query import governed_reader, serve_audit_query
from metallo.execution_core.v1 import execution_core_pb2 as pb

#: The most of a dry run's explanation its audit record keeps.
EXPLANATION_LIMIT = 500


def reconcile_conclusion(reply: pb.ReconcileRunReply) -> tuple[str, dict[str, object]]:
    """What a ``ReconcileRun`` dry run concluded: ``allowed`` or ``not-reconcilable`` (the
    real decision's refusal), and what the decision would do."""
    if reply.eligible:
        then = "a new Attempt follows" if reply.will_retry else "the Run ends lost"
        would = f"mark Attempt {reply.attempt_number} lost; {then}"
    else:
        would = "nothing: the decision would be refused"
    return (DRY_RUN_ALLOWED if reply.eligible else reasons.NOT_RECONCILABLE,
            {"allowed": reply.eligible, "would": would, "attempt_number": reply.attempt_number,
             "will_retry": reply.will_retry, "explanation": reply.explanation[:EXPLANATION_LIMIT]})


TRAIL = AuditTrail("execution_core", {
    pb.LaunchRun: "run.launch",
    pb.RerunRun: "run.rerun",
    pb.CancelRun: "run.cancel",
    pb.ReconcileRun: "run.reconcile",
    pb.ReadRunLog: "run.read-log",
    pb.DrainSite: "site.drain",
    pb.ResumeSite: "site.resume",
}, conclusions={pb.ReconcileRun: reconcile_conclusion})


def register_audit_query(server, authority: GovernanceAuthority) -> None:
    """Serve ``ListAuditRecords`` on ``server`` (``audit.read`` or operator ``platform.read``)."""
    serve_audit_query(server, pb.ListAuditRecords,
                      governed_reader(authority.may_read_audit, AuthorityUnavailable))
