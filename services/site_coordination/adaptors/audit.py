"""What Site Coordination audits (docs/operators.md, Audit): the operator commands on
command grants, each recorded in the deciding transaction; read permits the Site
edge issues or refuses; and ``ListAuditRecords`` over its own ``audit_records``."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from metallo.audit import ACCEPTED, REFUSED, AuditEntry, AuditTrail, append
from metallo.audit.query import governed_reader, serve_audit_query
from metallo.audit.redaction import redact
from metallo.site_coordination.v1 import site_coordination_pb2 as pb
from site_coordination.application.ports import AuthorityUnavailable, OperatorAuthority
from site_coordination.domain.errors import Refusal
from site_coordination.domain.grants import CommandGrant
from site_coordination.domain.streams import check_identifier

TRAIL = AuditTrail("site_coordination", {
    pb.CreateCommandGrant: "grant.create",
    pb.RevokeCommandGrant: "grant.revoke",
})

READ_PERMIT = "read-permit.issue"
#: Fields of a read authorisation request an audit summary keeps (never a path's text
#: beyond its name, never log text).
_READ_FIELDS = ("attempt_id", "viewer", "read_kind", "path", "max_bytes")


def register_audit_query(server, authority: OperatorAuthority) -> None:
    """Serve ``ListAuditRecords`` on ``server`` (``audit.read`` or operator ``platform.read``)."""
    serve_audit_query(server, pb.ListAuditRecords,
                      governed_reader(authority.may_read_audit, AuthorityUnavailable))


async def attempt_project(store, grant: CommandGrant, attempt_id: str) -> str:
    """The Project of the caller's stream's Attempt ``attempt_id`` ("" when the stream
    does not know it, or the id is malformed)."""
    try:
        check_identifier("attempt_id", attempt_id)
    except Refusal:
        return ""
    found = await store.attempt(attempt_id)
    if found is None or found[0] != grant.stream:
        return ""
    return found[1].project


async def record_read_permit(session: AsyncSession, grant: CommandGrant, request: dict[str, Any],
                             *, project: str, permit: dict[str, Any] | None = None,
                             code: str = "") -> None:
    """Append the audit record of a read authorisation at the Site edge: the permit
    issued (``permit``) or the refusal's ``code``. The actor is the viewer; the
    principal the Runtime's command grant."""
    summary = {k: request.get(k) for k in _READ_FIELDS if k in request}
    affected = {"site_id": grant.stream.site_id, "attempt_id": str(request.get("attempt_id", ""))}
    if permit is not None:
        affected.update(permit_id=permit["permit_id"], run_id=permit["run_id"])
    await append(session, AuditEntry(
        actor=str(request.get("viewer", "")), principal=grant.grant_id, project=project,
        action=READ_PERMIT, decision=ACCEPTED if permit is not None else REFUSED, code=code,
        request_id=permit["permit_id"] if permit is not None else "",
        affected=affected, summary=redact(summary)))
