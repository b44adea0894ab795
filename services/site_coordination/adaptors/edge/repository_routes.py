"""The Site edge's repository-grant routes (docs/site-edge.md, Repository grants), each
decision audited (docs/operators.md, Audit): an issued grant and a revocation in the
deciding transaction; a refusal, after that transaction rolled back, in its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Path, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from site_coordination.adaptors import audit
from site_coordination.adaptors.edge import schemas as s
from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.adaptors.run_ends_store import PostgresRunEnds
from site_coordination.application import site_requests
from site_coordination.domain.errors import Refusal
from site_coordination.domain.grants import CommandGrant

#: The refusal code a batch revocation's per-id answer stands for.
_BATCH_CODES = {"not-found": "repository-grant-not-found", "forbidden": "grant-wrong-scope"}


def repository_grant(issued: site_requests.RepositoryGrantIssued | None
                     ) -> s.RepositoryGrant | None:
    """The answer's grant (with its token, shown once); None when none was asked for."""
    if issued is None:
        return None
    return s.RepositoryGrant(
        grant_id=issued.grant_id, direction=issued.direction, username=issued.username,
        token=issued.token, repository_url=issued.repository_url, expires_at=issued.expires_at)


async def issue_recorded(svc, session: AsyncSession, store: PostgresSiteStore,
                         grant: CommandGrant, attempt_id: str, direction: str,
                         refused: list[Refusal]) -> site_requests.RepositoryGrantIssued:
    """Issue the Attempt's repository grant and append its audit record in the caller's
    transaction. A refusal is appended to ``refused`` (so the caller records it after
    the rollback, :func:`record_refusal`) and raised again."""
    try:
        issued = await site_requests.issue_repository_grant(
            store, PostgresRunEnds(session), svc.authority, svc.source_control(session),
            grant, attempt_id, direction, svc.settings.repository_grant_seconds)
    except Refusal as refusal:
        refused.append(refusal)
        raise
    await audit.record_repository_grant_issue(session, store, grant, attempt_id, direction,
                                              issued_id=issued.grant_id)
    return issued


async def record_refusal(svc, grant: CommandGrant, attempt_id: str, direction: str,
                         refusal: Refusal) -> None:
    """Record a refused issue in a transaction of its own (the deciding one rolled back)."""
    async with svc.sessions.begin() as session:
        await audit.record_repository_grant_issue(session, PostgresSiteStore(session), grant,
                                                  attempt_id, direction, code=refusal.code)


def add_repository_grant_routes(router: APIRouter, services: Callable[[Request], object],
                                authenticate: Callable[[PostgresSiteStore, Request],
                                                       Awaitable[CommandGrant]]) -> None:
    """Add issue, revoke and batch-revoke to ``router``; ``services`` gives a request's
    :class:`~site_coordination.adaptors.edge.app.EdgeServices`."""

    @router.post("/attempts/{attempt_id}/repository-grants", response_model=s.RepositoryGrant,
                 status_code=201, tags=["repository grants"])
    async def issue_repository_grant(request: Request, body: s.RepositoryGrantRequest,
                                     attempt_id: str = Path(min_length=1, max_length=128)):
        """Issue a stage-in (read) or stage-out (read+write) identity for the Attempt's saved
        repository."""
        svc = services(request)
        grant: CommandGrant | None = None
        refused: list[Refusal] = []
        try:
            async with svc.sessions.begin() as session:
                store = PostgresSiteStore(session)
                grant = await authenticate(store, request)
                issued = await issue_recorded(svc, session, store, grant, attempt_id,
                                              body.direction, refused)
        except Refusal as refusal:
            if grant is not None and refused:  # an authenticated caller's refusal is a decision
                await record_refusal(svc, grant, attempt_id, body.direction, refusal)
            raise
        return repository_grant(issued)

    @router.delete("/repository-grants/{grant_id}", status_code=204, tags=["repository grants"])
    async def revoke_repository_grant(request: Request,
                                      grant_id: str = Path(min_length=1, max_length=128)):
        """Revoke a repository grant of the caller's stream (idempotent)."""
        svc = services(request)
        grant: CommandGrant | None = None
        try:
            async with svc.sessions.begin() as session:
                store = PostgresSiteStore(session)
                grant = await authenticate(store, request)
                if await site_requests.revoke_repository_grant(
                        store, svc.source_control(session), grant, grant_id):
                    await audit.record_repository_grant_revocations(
                        session, store, [grant_id], reason="runtime",
                        principal=grant.grant_id)
        except Refusal as refusal:
            if grant is not None:
                async with svc.sessions.begin() as session:
                    await audit.record_repository_grant_revocation_refused(
                        session, PostgresSiteStore(session), grant, grant_id, refusal.code)
            raise
        return Response(status_code=204)

    @router.post("/repository-grants/revocations",
                 response_model=s.RepositoryGrantRevocationResults,
                 tags=["repository grants"])
    async def revoke_repository_grants(request: Request, body: s.RepositoryGrantRevocations):
        """Revoke up to 100 repository grants of the caller's stream in one transaction;
        each id gets its own answer (idempotent)."""
        svc = services(request)
        async with svc.sessions.begin() as session:
            store = PostgresSiteStore(session)
            grant = await authenticate(store, request)
            results, revoked = await site_requests.revoke_repository_grants(
                store, svc.source_control(session), grant, body.grant_ids)
            await audit.record_repository_grant_revocations(
                session, store, revoked, reason="runtime", principal=grant.grant_id)
            for grant_id, answer in results.items():
                if answer != "revoked":
                    await audit.record_repository_grant_revocation_refused(
                        session, store, grant, grant_id, _BATCH_CODES[answer])
        return s.RepositoryGrantRevocationResults(results=results)
