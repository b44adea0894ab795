"""Operator commands and queries: draining Sites and platform-wide reads.

Each checks the acting member's platform-wide operator capability in the
governance file now (``sites.drain`` to drain or resume, ``platform.read`` to
read), never a cached verdict. Draining is Execution Core's own state because
it is a planning rule: a draining Site gets no new Attempts (planning and the
supervisor's next Attempt wait with ``site-draining``) while its accepted work
goes on unchanged (docs/decisions/0027-site-drain-owned-by-execution-core.md).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.application.ports import AuthorityUnavailable, OperatorAuthority, SiteDrainStore
from execution_core.domain import reasons
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected

_SITE_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_REASON = 200


def check_operator(authority: OperatorAuthority, member: str, capability: str) -> None:
    """Raise ``permission-denied`` unless ``member`` holds the operator ``capability``
    now; a transient ``governance-unavailable`` when the file cannot answer."""
    try:
        allowed = bool(member) and authority.is_operator(member, capability)
    except AuthorityUnavailable as exc:
        raise Rejected(reasons.WAIT_GOVERNANCE_UNAVAILABLE, str(exc), transient=True) from exc
    if not allowed:
        raise Rejected(reasons.PERMISSION_DENIED,
                       f"member {member or '(none)'} does not hold the operator capability "
                       f"{capability}", {"capability": capability})


def _check_site(authority: OperatorAuthority, site_id: str) -> None:
    if not _SITE_ID.match(site_id):
        raise Rejected(reasons.INVALID_ARGUMENT, f"site_id {site_id[:80]!r} is not a Site id")
    try:
        known = authority.site_known(site_id)
    except AuthorityUnavailable as exc:
        raise Rejected(reasons.WAIT_GOVERNANCE_UNAVAILABLE, str(exc), transient=True) from exc
    if not known:
        raise Rejected("site-not-found", f"no Site {site_id!r} in the governance file")


def drain_message(row: dict[str, Any], active: int) -> pb.SiteDrain:
    """The contract's SiteDrain for a ``site_drains`` row and its active-Run count."""
    return pb.SiteDrain(site_id=row["site_id"], drained_by=row["drained_by"],
                        drained_at=row["drained_at"].isoformat(), reason=row["reason"],
                        active_runs=active)


async def drain_site(session: AsyncSession, cmd: pb.DrainSite, *, drains: SiteDrainStore,
                     authority: OperatorAuthority) -> pb.DrainSiteReply:
    """Drain a governed Site (``sites.drain``); draining again changes nothing."""
    member = cmd.metadata.acting_member
    check_operator(authority, member, "sites.drain")
    _check_site(authority, cmd.site_id)
    if len(cmd.reason) > MAX_REASON:
        raise Rejected(reasons.INVALID_ARGUMENT, f"reason is at most {MAX_REASON} characters")
    row, already = await drains.drain(session, cmd.site_id, member, cmd.reason)
    active = (await drains.active_runs_by_site(session)).get(cmd.site_id, 0)
    return pb.DrainSiteReply(drain=drain_message(row, active), already_draining=already)


async def resume_site(session: AsyncSession, cmd: pb.ResumeSite, *, drains: SiteDrainStore,
                      authority: OperatorAuthority) -> pb.ResumeSiteReply:
    """Resume a Site (``sites.drain``) and make due the Runs that waited for it."""
    check_operator(authority, cmd.metadata.acting_member, "sites.drain")
    _check_site(authority, cmd.site_id)
    was = await drains.resume(session, cmd.site_id)
    woken = await drains.wake_held(session, cmd.site_id, reasons.WAIT_SITE_DRAINING) if was else 0
    return pb.ResumeSiteReply(site_id=cmd.site_id, was_draining=was, runs_woken=woken)


async def list_site_drains(session: AsyncSession, q: pb.ListSiteDrains, *,
                           drains: SiteDrainStore, authority: OperatorAuthority
                           ) -> pb.ListSiteDrainsReply:
    """Every draining Site with its active Runs (``platform.read``)."""
    check_operator(authority, q.metadata.acting_member, "platform.read")
    active = await drains.active_runs_by_site(session)
    return pb.ListSiteDrainsReply(drains=[drain_message(r, active.get(r["site_id"], 0))
                                          for r in await drains.drains(session)])


#: Most attempt ids one CountActiveRuns may name.
MAX_COUNTED_ATTEMPTS = 10_000


async def count_active_runs(session: AsyncSession, q: pb.CountActiveRuns, *,
                            drains: SiteDrainStore, authority: OperatorAuthority,
                            lost_after_seconds: float) -> pb.CountActiveRunsReply:
    """Runs of the whole platform not terminal yet, or with ``site_id`` those placed on
    that Site, with ``attempt_ids`` those whose current Attempt is one of them
    (``platform.read``); the reply names the reconciliation period too."""
    check_operator(authority, q.metadata.acting_member, "platform.read")
    if len(q.attempt_ids) > MAX_COUNTED_ATTEMPTS:
        raise Rejected(reasons.INVALID_ARGUMENT,
                       f"at most {MAX_COUNTED_ATTEMPTS} attempt_ids at once")
    site_id = q.site_id[:128] or None
    attempt_ids = [a[:128] for a in q.attempt_ids] if len(q.attempt_ids) else None
    active = await drains.count_active(session, site_id, attempt_ids)
    return pb.CountActiveRunsReply(active=active, lost_after_seconds=lost_after_seconds)
