"""What Site Coordination audits (docs/operators.md, Audit): the operator commands on
command grants, each recorded in the deciding transaction; read permits the Site
edge issues or refuses; repository grants issued, refused and revoked (by the
Runtime, or at their Attempt's or Run's end); and ``ListAuditRecords`` over its own
``audit_records``."""

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
REPOSITORY_GRANT_ISSUE = "repository-grant.issue"
REPOSITORY_GRANT_REVOKE = "repository-grant.revoke"
#: The principal of a revocation Site Coordination makes itself (an Attempt's or
#: Run's end learnt from Execution Core), not at a Runtime's request.
SELF = "site_coordination"
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
    return (await _attempt_facts(store, grant, attempt_id))[0]


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


async def record_repository_grant_issue(session: AsyncSession, store, grant: CommandGrant,
                                        attempt_id: str, direction: str, *,
                                        issued_id: str = "", code: str = "") -> None:
    """Append the audit record of a repository grant the Site edge issued (its id
    ``issued_id``) or refused (the refusal's ``code``) for the caller's Attempt. The
    actor is the Site; the principal the Runtime's command grant. Never the token
    nor its hash: only ids, the direction and the decision."""
    project, run_id = await _attempt_facts(store, grant, attempt_id)
    affected = {"site_id": grant.stream.site_id, "attempt_id": attempt_id, "run_id": run_id,
                "repository_grant_id": issued_id}
    await append(session, AuditEntry(
        actor=grant.stream.site_id, principal=grant.grant_id, project=project,
        action=REPOSITORY_GRANT_ISSUE, decision=ACCEPTED if issued_id else REFUSED,
        code=code, request_id=issued_id, affected=affected,
        summary=redact({"direction": direction})))


async def record_repository_grant_revocations(session: AsyncSession, store,
                                              grant_ids: list[str], *, reason: str,
                                              principal: str = SELF) -> None:
    """Append one ``repository-grant.revoke`` record (accepted) per grant id revoked in
    this transaction. ``reason``: ``runtime`` (the Runtime asked), ``attempt-ended``
    or ``run-ended``; ``principal``: the Runtime's command grant, or :data:`SELF`. The
    actor is the grant's Site."""
    for grant_id in grant_ids:
        record = await store.repository_grant(grant_id)
        if record is None:
            continue
        found = await store.attempt(record.attempt_id)
        await append(session, AuditEntry(
            actor=record.stream.site_id, principal=principal,
            project=found[1].project if found is not None else "",
            action=REPOSITORY_GRANT_REVOKE, decision=ACCEPTED, request_id=grant_id,
            affected={"site_id": record.stream.site_id, "run_id": record.run_id,
                      "attempt_id": record.attempt_id, "repository_grant_id": grant_id},
            summary={"direction": record.direction, "reason": reason}))


async def record_repository_grant_revocation_refused(session: AsyncSession, store,
                                                     grant: CommandGrant, grant_id: str,
                                                     code: str) -> None:
    """Append the refused ``repository-grant.revoke`` record of a Runtime's request for
    ``grant_id`` (``repository-grant-not-found``, or another stream's grant)."""
    record = None
    try:
        check_identifier("grant_id", grant_id)
        record = await store.repository_grant(grant_id)
    except Refusal:
        grant_id = ""  # a malformed id is not kept
    project = ""
    affected = {"site_id": grant.stream.site_id, "repository_grant_id": grant_id}
    if record is not None and record.stream == grant.stream:
        project, _ = await _attempt_facts(store, grant, record.attempt_id)
        affected.update(run_id=record.run_id, attempt_id=record.attempt_id)
    await append(session, AuditEntry(
        actor=grant.stream.site_id, principal=grant.grant_id, project=project,
        action=REPOSITORY_GRANT_REVOKE, decision=REFUSED, code=code, request_id=grant_id,
        affected=affected, summary={"reason": "runtime"}))


async def _attempt_facts(store, grant: CommandGrant, attempt_id: str) -> tuple[str, str]:
    """``(project, run_id)`` of the caller's stream's Attempt (``("", "")`` when unknown
    to the stream or malformed)."""
    try:
        check_identifier("attempt_id", attempt_id)
    except Refusal:
        return "", ""
    found = await store.attempt(attempt_id)
    if found is None or found[0] != grant.stream:
        return "", ""
    return found[1].project, found[1].run_id
