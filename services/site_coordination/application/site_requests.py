"""A Runtime's authority requests at the Site edge (seed 001; seed 004 §4B):
execution and read authorisation, Run-scoped repository grants, member tokens.

Each runs in one transaction (a :class:`SiteStore`); the verdict is used once and
never cached.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from site_coordination.application.ports import (
    MemberTokenIssuer,
    ProjectAuthority,
    RepositoryGrantRecord,
    RunEnds,
    SiteStore,
    SourceControl,
)
from site_coordination.application.run_ends import refuse_after_run_end
from site_coordination.domain.authorisation import (
    AttemptState,
    check_read_path,
    decide_execution,
    decide_member_token,
    decide_read,
    decide_repository_grant,
)
from site_coordination.domain.errors import Forbidden, Invalid, NotFound
from site_coordination.domain.grants import CommandGrant, check_scope
from site_coordination.domain.streams import StreamKey, check_identifier


async def _attempt(store: SiteStore, grant: CommandGrant, attempt_id: str) -> AttemptState:
    check_identifier("attempt_id", attempt_id)
    found = await store.attempt(attempt_id)
    if found is None:
        raise NotFound("attempt-not-found", "no prepared Attempt has this attempt_id")
    stream, attempt = found
    check_scope(grant, stream)
    return attempt


async def authorise_execution(store: SiteStore, authority: ProjectAuthority,
                              grant: CommandGrant, request: dict[str, str]) -> dict[str, Any]:
    """When the request matches the saved material and accepted-work authority holds
    now, return ``{"material", "authority": {"project", "site_id", "member_id"},
    "binding": {"site_username", "account"}}``; raise :class:`Forbidden`
    ``authorisation-refused`` otherwise (seed 001, authorise interface).
    """
    attempt = await _attempt(store, grant, request["attempt_id"])
    facts = authority.facts(attempt.project, str(attempt.member.get("id", "")),
                            grant.stream.site_id)
    decide_execution(attempt, request, facts, grant.stream.site_id)
    site_username, account = facts.binding  # checked equal to the saved binding
    return {
        "material": attempt.material,
        "authority": {"project": attempt.project, "site_id": grant.stream.site_id,
                      "member_id": request["member_id"]},
        "binding": {"site_username": site_username, "account": account},
    }


async def authorise_read(store: SiteStore, authority: ProjectAuthority, grant: CommandGrant,
                         request: dict[str, Any], permit_seconds: int) -> dict[str, Any]:
    """Issue a read permit for the exact Run, Attempt, viewer, read kind, path and byte
    limit, valid ``permit_seconds``; the permit is stored so it can be checked on use.
    """
    attempt = await _attempt(store, grant, request["attempt_id"])
    facts = authority.facts(attempt.project, request["viewer"], grant.stream.site_id)
    decide_read(attempt, request, facts)
    now = await store.now()
    permit = {
        "permit_id": "rp-" + secrets.token_hex(12),
        "run_id": attempt.run_id,
        "attempt_id": attempt.attempt_id,
        "viewer": request["viewer"],
        "read_kind": request["read_kind"],
        "path": check_read_path(request["path"]),
        "max_bytes": request["max_bytes"],
        "expires_at": now + timedelta(seconds=permit_seconds),
    }
    await store.insert_read_permit({**permit, "site_id": grant.stream.site_id,
                                    "environment": grant.stream.environment})
    return permit


_PERMIT_FIELDS = ("permit_id", "run_id", "attempt_id", "viewer", "read_kind", "path",
                  "max_bytes", "expires_at")


async def check_read_permit(store: SiteStore, authority: ProjectAuthority, grant: CommandGrant,
                            permit_id: str) -> dict[str, Any]:
    """Confirm a read permit on use (seed 001, Private reads): it belongs to the caller's
    stream, has not expired, and its viewer is still authorised now. Returns the permit.

    Raises :class:`NotFound` ``read-permit-not-found`` and :class:`Forbidden`
    ``authorisation-refused`` (``permit-expired``, ``viewer-not-authorised``,
    ``viewer-without-account``, ``project-unknown``).
    """
    check_identifier("permit_id", permit_id)
    stored = await store.read_permit(permit_id)
    if stored is None:
        raise NotFound("read-permit-not-found", "no read permit has this id")
    check_scope(grant, StreamKey(stored["site_id"], stored["environment"]))
    if not stored["live"]:
        raise Forbidden("authorisation-refused", "the read permit has expired",
                        reason="permit-expired")
    attempt = await _attempt(store, grant, stored["attempt_id"])
    permit = {k: stored[k] for k in _PERMIT_FIELDS}
    facts = authority.facts(attempt.project, permit["viewer"], grant.stream.site_id)
    decide_read(attempt, permit, facts)
    return permit


@dataclass(frozen=True)
class RepositoryGrantIssued:
    """A repository grant as returned once to the Runtime (with its token)."""

    grant_id: str
    direction: str
    username: str
    token: str
    repository_url: str
    expires_at: datetime


async def issue_repository_grant(store: SiteStore, ends: RunEnds, authority: ProjectAuthority,
                                 source_control: SourceControl, grant: CommandGrant,
                                 attempt_id: str, direction: str,
                                 lifetime_seconds: int) -> RepositoryGrantIssued:
    """Issue a stage-in (read) or stage-out (read+write) identity for the Attempt's exact
    saved repository, valid ``lifetime_seconds`` (seed 001, Repository grants). Refused
    (409 ``attempt-completed``) once the Attempt or its Run has ended.
    """
    attempt = await _attempt(store, grant, attempt_id)
    await refuse_after_run_end(ends, attempt.run_id, attempt.attempt_id)
    facts = authority.facts(attempt.project, str(attempt.member.get("id", "")),
                            grant.stream.site_id)
    now = await store.now()
    url = decide_repository_grant(attempt, direction, facts, grant.stream.site_id, now)
    grant_id = "rg-" + secrets.token_hex(8)
    expires_at = now + timedelta(seconds=lifetime_seconds)
    credential = await source_control.issue(url, direction, grant_id, expires_at)
    await store.insert_repository_grant(
        RepositoryGrantRecord(
            grant_id=grant_id, stream=grant.stream, run_id=attempt.run_id,
            attempt_id=attempt.attempt_id, direction=direction, repository_url=url,
            username=credential.username, provider_ref=credential.provider_ref,
            expires_at=expires_at, revoked_at=None,
        ),
        issued_by=grant.grant_id,
    )
    return RepositoryGrantIssued(grant_id, direction, credential.username, credential.token,
                                 url, expires_at)


async def revoke_repository_grant(store: SiteStore, source_control: SourceControl,
                                  grant: CommandGrant, grant_id: str) -> bool:
    """Revoke a repository grant of the caller's stream (idempotent); True when this
    call revoked it, False when it was revoked before.

    Raises :class:`NotFound` ``repository-grant-not-found`` and :class:`Forbidden`
    for another stream's grant.
    """
    check_identifier("grant_id", grant_id)
    record = await store.repository_grant(grant_id)
    if record is None:
        raise NotFound("repository-grant-not-found", "no repository grant has this id")
    check_scope(grant, record.stream)
    if record.revoked_at is not None:
        return False
    await source_control.revoke(record.provider_ref)
    await store.revoke_repository_grant(grant_id)
    return True


#: Grants one revocation request may name (bounded input; the Runtime sends fewer).
MAX_REVOCATIONS = 100


async def revoke_repository_grants(store: SiteStore, source_control: SourceControl,
                                   grant: CommandGrant, grant_ids: list[str]
                                   ) -> tuple[dict[str, str], list[str]]:
    """Revoke several repository grants of the caller's stream in one transaction
    (seed 000: each staging job's access is revoked after it ends; the Runtime sends
    the releases of a second or so at once). Idempotent per id.

    Returns ``({grant_id: "revoked" | "not-found" | "forbidden"}, revoked_now)`` — one
    id's answer never stops the others (``revoked`` also for one revoked before;
    ``revoked_now`` lists only those this call revoked, in id order). Raises
    :class:`~site_coordination.domain.errors.Invalid` ``invalid-argument`` for a
    malformed id or more than :data:`MAX_REVOCATIONS` ids (nothing is revoked then).
    """
    if not 1 <= len(grant_ids) <= MAX_REVOCATIONS:
        raise Invalid("invalid-argument", f"name 1 to {MAX_REVOCATIONS} grant ids")
    for grant_id in grant_ids:
        check_identifier("grant_id", grant_id)
    answers: dict[str, str] = {}
    revoked_now: list[str] = []
    for grant_id in sorted(set(grant_ids)):  # once each; one lock order for every caller
        try:
            if await revoke_repository_grant(store, source_control, grant, grant_id):
                revoked_now.append(grant_id)
        except NotFound:
            answers[grant_id] = "not-found"
        except Forbidden:
            answers[grant_id] = "forbidden"
        else:
            answers[grant_id] = "revoked"
    return answers, revoked_now


async def issue_member_token(store: SiteStore, authority: ProjectAuthority,
                             issuer: MemberTokenIssuer, grant: CommandGrant, attempt_id: str,
                             lifetime_seconds: int) -> tuple[str, datetime]:
    """Issue a per-action member token for the Attempt's saved member (≤ 3600 s)."""
    attempt = await _attempt(store, grant, attempt_id)
    facts = authority.facts(attempt.project, str(attempt.member.get("id", "")),
                            grant.stream.site_id)
    member_id, site_username = decide_member_token(attempt, facts, grant.stream.site_id)
    return issuer.issue(member_id, site_username, min(lifetime_seconds, 3600))
