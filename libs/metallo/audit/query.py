"""``ListAuditRecords``: one owner's audit records, filtered and paged, oldest first.

Each owner answers for its own ``audit_records`` only (no code reads another
service's database); a client that wants every owner's asks each and merges by
``(recorded_at, service, record_id)``, resuming each owner from the ``cursor`` of
the last record it used (docs/decisions/0033-audit-kept-by-each-owner.md).

Who may read: a member holding ``audit.read`` in the Project, or an operator
holding ``platform.read`` (every Project, and the platform-wide records whose
Project is ""). See :func:`audit_readable`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import and_, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from metallo.audit.records import audit_records
from metallo.common.v1 import common_pb2
from metallo.governance import Governance
from metallo.messaging.errors import Rejected

DEFAULT_PAGE = 50
MAX_PAGE = 200
READ_CAPABILITY = "audit.read"
OPERATOR_CAPABILITY = "platform.read"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$")

#: ``may_read(project, member)``: whether the member may read the Project's audit now
#: (``project`` "" = the platform-wide records). Raises Rejected (e.g. a transient
#: ``governance-unavailable``) when the authority cannot answer.
MayRead = Callable[[str, str], bool]


def audit_readable(governance: Governance, project: str, member: str) -> bool:
    """Whether ``member`` may read ``project``'s audit in this governance snapshot:
    the operator capability ``platform.read`` (any Project and ""), or ``audit.read``
    in the Project."""
    if governance.is_operator(member, OPERATOR_CAPABILITY):
        return True
    return bool(project) and governance.has_capability(project, member, READ_CAPABILITY)


def _invalid(message: str) -> Rejected:
    return Rejected("invalid-argument", message)


def parse_since(value: str) -> datetime | None:
    """``since`` (RFC 3339; a naive time is UTC) or None for ""; Rejected
    ``invalid-argument`` otherwise."""
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _invalid(f"since {value[:40]!r} is not an RFC 3339 time") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def encode_cursor(recorded_at: datetime, seq: int) -> str:
    """The page token that resumes right after the record (recorded_at, seq)."""
    raw = json.dumps([recorded_at.isoformat(), seq]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> tuple[datetime, int]:
    """(recorded_at, seq) of a page token; Rejected ``invalid-argument`` when malformed."""
    try:
        at, seq = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return datetime.fromisoformat(at), int(seq)
    except (ValueError, TypeError) as exc:
        raise _invalid("page_token is not valid") from exc


def record_message(service: str, row) -> common_pb2.AuditRecord:
    """The contract's AuditRecord of an ``audit_records`` row."""
    return common_pb2.AuditRecord(
        record_id=f"{service}:{row.seq}", service=service,
        recorded_at=row.recorded_at.astimezone(UTC).isoformat(),
        actor=row.actor, principal=row.principal, project=row.project, action=row.action,
        affected={k: str(v) for k, v in row.affected.items()}, request_id=row.request_id,
        correlation_id=row.correlation_id, decision=row.decision, code=row.code,
        summary_json=json.dumps(row.summary, sort_keys=True, ensure_ascii=False),
        cursor=encode_cursor(row.recorded_at, row.seq))


async def list_audit_records(session: AsyncSession, metadata: common_pb2.QueryMetadata,
                             audit_filter: common_pb2.AuditFilter, *, service: str,
                             may_read: MayRead) -> common_pb2.AuditRecords:
    """The records of ``metadata.project`` ("" = platform-wide) from ``since``, of
    ``actor`` (member or principal) when given, oldest first, at most ``page_size``
    (1..200, 0 = 50) with a next-page token when more follow.

    Raises Rejected ``invalid-argument`` (metadata, filter, page) and
    ``permission-denied`` (detail ``capability``)."""
    member, project = metadata.acting_member, metadata.project
    if not _ID.match(member):
        raise _invalid("metadata.acting_member is required")
    if project and not _ID.match(project):
        raise _invalid("metadata.project is not a Project id")
    if audit_filter.actor and not _ID.match(audit_filter.actor):
        raise _invalid("actor is not a member id or principal")
    size = audit_filter.page.page_size or DEFAULT_PAGE
    if not 1 <= size <= MAX_PAGE:
        raise _invalid(f"page_size must be 1..{MAX_PAGE}")
    since = parse_since(audit_filter.since)
    after = decode_cursor(audit_filter.page.page_token) if audit_filter.page.page_token else None
    if not may_read(project, member):
        scope = f"Project {project}" if project else "the platform-wide records"
        raise Rejected("permission-denied",
                       f"member {member} may not read the audit of {scope}: it needs "
                       f"{READ_CAPABILITY} in the Project or the operator capability "
                       f"{OPERATOR_CAPABILITY}", {"capability": READ_CAPABILITY})
    t = audit_records.c
    conditions = [t.project == project]
    if since is not None:
        conditions.append(t.recorded_at >= since)
    if audit_filter.actor:
        conditions.append(or_(t.actor == audit_filter.actor, t.principal == audit_filter.actor))
    if after is not None:
        conditions.append(tuple_(t.recorded_at, t.seq) > tuple_(*after))
    rows = (await session.execute(
        select(audit_records).where(and_(*conditions)).order_by(t.recorded_at, t.seq)
        .limit(size + 1))).all()
    reply = common_pb2.AuditRecords(records=[record_message(service, r) for r in rows[:size]])
    if len(rows) > size:
        reply.page.next_page_token = reply.records[-1].cursor
    return reply


def serve_audit_query(server, query_type: type, may_read: MayRead) -> None:
    """Answer ``query_type`` (the owner's ``ListAuditRecords``) on the CommandServer
    ``server`` from its own ``audit_records``."""

    @server.query(query_type)
    async def list_records(session: AsyncSession, query) -> common_pb2.AuditRecords:
        return await list_audit_records(session, query.metadata, query.filter,
                                        service=server.context, may_read=may_read)


def governed_reader(check: Callable[[str, str], bool],
                    unavailable: type[Exception]) -> MayRead:
    """A :data:`MayRead` over an authority's ``check(project, member)`` (e.g. a
    service's ``may_read_audit``): its ``unavailable`` exception becomes a transient
    ``governance-unavailable`` rejection (a retry decides afresh)."""

    def may_read(project: str, member: str) -> bool:
        try:
            return check(project, member)
        except unavailable as exc:
            raise Rejected("governance-unavailable", str(exc), transient=True) from exc

    return may_read
