"""What Pipeline Coordination audits (docs/operators.md, Audit): starting, stopping
and rerunning Pipelines, each recorded in the deciding transaction, and
``ListAuditRecords`` over its own ``audit_records``."""

from __future__ import annotations

from metallo.audit import AuditTrail
from metallo.audit.query import governed_reader, serve_audit_query
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from pipeline_coordination.adaptors.governance_authority import GovernanceAuthority
from pipeline_coordination.application.ports import AuthorityUnavailable

TRAIL = AuditTrail("pipeline_coordination", {
    pb.StartPipeline: "pipeline.start",
    pb.StopPipeline: "pipeline.stop",
    pb.RerunPipeline: "pipeline.rerun",
})


def register_audit_query(server, authority: GovernanceAuthority) -> None:
    """Serve ``ListAuditRecords`` on ``server`` (``audit.read`` or operator ``platform.read``)."""
    serve_audit_query(server, pb.ListAuditRecords,
                      governed_reader(authority.may_read_audit, AuthorityUnavailable))
