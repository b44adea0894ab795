"""The Site edge FastAPI application (seed 004 §4B; routes in docs/site-edge.md).

Every route except ``/healthz`` and ``/.well-known/jwks.json`` needs a ``psb_``
command grant, read afresh from PostgreSQL in the request's own transaction. A
refusal rolls that transaction back, so it changes nothing, and is logged with
its code only (never a secret). A request refused for its shape (body, path,
query) is answered only after its caller is authenticated (``errors``,
``caller``), and the interactive API pages exist only when ``api_docs`` is set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from site_coordination.adaptors import audit
from site_coordination.adaptors.edge import schemas as s
from site_coordination.adaptors.edge.caller import caller_check
from site_coordination.adaptors.edge.errors import install_error_handlers
from site_coordination.adaptors.edge.notifier import StreamNotifier
from site_coordination.adaptors.edge.repository_routes import (
    add_repository_grant_routes,
    issue_recorded,
    record_refusal,
    repository_grant,
)
from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.adaptors.run_ends_store import PostgresRunEnds
from site_coordination.application import run_ends, site_requests, streams
from site_coordination.application.grants import authenticate
from site_coordination.application.ports import (
    EventPublisher,
    MemberTokenIssuer,
    ProjectAuthority,
    SourceControl,
)
from site_coordination.domain.deferrals import DeferralCatalogue
from site_coordination.domain.errors import Refusal
from site_coordination.domain.grants import CommandGrant
from site_coordination.domain.streams import StoredCommand, StreamKey

log = logging.getLogger("site_coordination.edge")

API_VERSION = "1.0.0"
MAX_SEQUENCE = 2**62


@dataclass
class EdgeSettings:
    """Limits and lifetimes of the edge (seconds, bytes)."""

    max_body_bytes: int = 256 * 1024
    max_json_depth: int = 32
    max_wait_seconds: float = 30.0
    repository_grant_seconds: int = 7200
    member_token_seconds: int = 3600
    read_permit_seconds: int = 300
    api_docs: bool = False  # serve /docs, /redoc and /openapi.json


@dataclass
class EdgeServices:
    """What the edge's routes need, wired by ``__main__`` (or a test)."""

    sessions: async_sessionmaker[AsyncSession]
    events: Callable[[AsyncSession], EventPublisher]
    authority: ProjectAuthority
    source_control: Callable[[AsyncSession], SourceControl]
    issuer: MemberTokenIssuer
    jwks: Callable[[], dict[str, Any]]
    catalogue: DeferralCatalogue
    # Sessions whose statements each commit on their own (no BEGIN/COMMIT round
    # trips); used by the pull, whose single write needs no multi-statement atomicity.
    autocommit_sessions: async_sessionmaker[AsyncSession] | None = None
    notifier: StreamNotifier | None = None
    settings: EdgeSettings = field(default_factory=EdgeSettings)
    # True once the server shuts down: a long-poll answers "no command" at once
    # instead of being cancelled mid-wait by the graceful-shutdown timeout.
    draining: Callable[[], bool] = lambda: False


_ERRORS = {
    status: {"model": s.ErrorBody, "description": text}
    for status, text in [
        (400, "Malformed request"), (401, "Missing, malformed, unknown, expired or revoked grant"),
        (403, "Outside the grant's stream, or refused by current authority"),
        (404, "Not found in the caller's stream"), (409, "Contradicts recorded state"),
        (413, "Body too large"), (422, "Invalid values, or JSON nested too deep"),
        (503, "An owner (Project authority, identity provider) cannot answer now"),
    ]
}

_bearer = HTTPBearer(auto_error=False, scheme_name="commandGrant",
                     description="A psb_ command grant naming one stream")


def _svc(request: Request) -> EdgeServices:
    return request.app.state.services


def create_app(services: EdgeServices | None = None) -> FastAPI:
    """Build the edge application; ``services`` may be None only to render OpenAPI."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        notifier = services.notifier if services else None
        if notifier:
            await notifier.start()
        try:
            yield
        finally:
            if notifier:
                await notifier.stop()

    docs = services is not None and services.settings.api_docs
    app = FastAPI(
        title="Metallo Site edge", version=API_VERSION, lifespan=lifespan,
        # The interactive pages and the live document only when an operator enables
        # them; contracts/site/openapi.json is rendered from app.openapi() regardless.
        docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
        description="HTTPS interface between a Site Runtime and Site Coordination "
                    "(seed 004 §4B; docs/site-edge.md, docs/site-commands.md).",
    )
    app.state.services = services

    install_error_handlers(app, caller_check(services.sessions) if services else None)

    @app.get("/healthz", response_model=s.Health, tags=["health"])
    async def healthz() -> s.Health:
        """Liveness; no credential, no database."""
        return s.Health()

    @app.get("/.well-known/jwks.json", tags=["identity"])
    async def jwks(request: Request) -> dict[str, Any]:
        """The lab member-token issuer's public keys (JWKS)."""
        return _svc(request).jwks()

    router = APIRouter(prefix="/v1", dependencies=[Security(_bearer)], responses=_ERRORS)

    async def _grant(store: PostgresSiteStore, request: Request) -> CommandGrant:
        return await authenticate(store, request.headers.get("authorization"))

    async def _pull_until(request: Request, deadline: float,
                          stream: StreamKey | None = None) -> StoredCommand | None:
        """Look for the next command until ``deadline`` (loop time). Each look is one
        statement that reads the grant afresh and delivers. ``stream`` given: the caller
        has just looked, so wait for a wake-up first."""
        svc = _svc(request)
        loop = asyncio.get_running_loop()
        pull_sessions = svc.autocommit_sessions or svc.sessions
        while True:
            if stream is not None:
                if svc.draining():
                    return None
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                if svc.notifier is not None:
                    await svc.notifier.wait(stream, min(remaining, 1.0))
                else:
                    await asyncio.sleep(min(remaining, 0.2))
            async with pull_sessions() as session, session.begin():
                grant, command = await streams.pull_next_for(
                    PostgresSiteStore(session), request.headers.get("authorization"))
            if command is not None:
                return command
            stream = grant.stream

    @router.get("/commands/next", response_model=s.SiteCommand, tags=["commands"],
                responses={204: {"description": "No command within the wait"}})
    async def next_command(request: Request,
                           wait: float = Query(0, ge=0, le=30, description="Seconds to wait (long-poll)")):
        """The next command of the caller's stream: the one after the last recorded result,
        the same one again until its result is recorded; 204 when none arrives in ``wait``."""
        svc = _svc(request)
        deadline = asyncio.get_running_loop().time() + min(wait, svc.settings.max_wait_seconds)
        command = await _pull_until(request, deadline)
        if command is None:
            return Response(status_code=204)
        # Built from stored rows: no response-model validation needed.
        return JSONResponse(command.to_wire())

    @router.post("/commands/{sequence}/result", response_model=s.ResultRecorded, tags=["commands"])
    async def record_result(
        request: Request, body: s.CommandResult,
        sequence: int = Path(ge=1, le=MAX_SEQUENCE),
        next_wait: float | None = Query(
            None, ge=0, le=30,
            description="When given: also answer the stream's next command as \"next\" "
                        "(delivered as by GET /v1/commands/next), waiting up to this many "
                        "seconds for one (long-poll); null when none arrives"),
    ):
        """Record the exact result of command ``sequence`` (once; acknowledgement advances
        with it). 409 ``result-conflict`` / ``command-not-delivered``. With ``next_wait``
        the answer also carries ``next``: the following command or null."""
        svc = _svc(request)
        result = body.model_dump(mode="json")
        async with svc.sessions.begin() as session:
            store = PostgresSiteStore(session)
            answer = await streams.record_result_for(
                store, svc.events(session), request.headers.get("authorization"), sequence,
                result, deliver_next=next_wait is not None)
            if answer.recorded and answer.command is not None:
                # A result that ends its Attempt ends the Attempt's repository grants.
                revoked = await run_ends.result_recorded(PostgresRunEnds(session),
                                                         svc.source_control(session), store,
                                                         answer.command, result)
                await audit.record_repository_grant_revocations(
                    session, store, revoked, reason="attempt-ended",
                    principal=answer.grant.grant_id)
        if next_wait is None:
            return JSONResponse({"recorded": answer.recorded})
        handed = answer.next
        if handed is None and next_wait > 0:
            # The result is committed: from here on a failure must not turn the answer
            # into an error, or the Runtime would believe the result unrecorded. It gets
            # ``next: null`` and pulls with GET, which reports the problem.
            deadline = asyncio.get_running_loop().time() + min(next_wait,
                                                               svc.settings.max_wait_seconds)
            try:
                handed = await _pull_until(request, deadline, answer.grant.stream)
            except (Refusal, DBAPIError, OSError) as exc:
                log.info("next command after the result of %s not handed out: %s",
                         sequence, getattr(exc, "code", type(exc).__name__))
        return JSONResponse({"recorded": answer.recorded,
                             "next": handed.to_wire() if handed is not None else None})

    @router.post("/commands/{sequence}/progress", response_model=s.ProgressAccepted,
                 status_code=202, tags=["commands"])
    async def report_progress(request: Request, body: s.ProgressReport,
                              sequence: int = Path(ge=1, le=MAX_SEQUENCE)):
        """Report a catalogued deferral of a pending command (once per command and code)."""
        svc = _svc(request)
        async with svc.sessions.begin() as session:
            store = PostgresSiteStore(session)
            grant = await _grant(store, request)
            reported = await streams.report_progress(store, svc.events(session), grant,
                                                     svc.catalogue, sequence, body.command_id,
                                                     body.code)
        return s.ProgressAccepted(reported=reported)

    @router.post("/attempts/{attempt_id}/native-end", response_model=s.NativeEndNoticed,
                 status_code=202, tags=["commands"])
    async def notice_native_end(request: Request, body: s.NativeEndNotice | None = None,
                                attempt_id: str = Path(min_length=1, max_length=128)):
        """Notice that the Attempt's native work ended (best effort, ADR 0016): the first
        notice publishes ``SiteNativeEndNoticed`` so Execution Core observes at once; a
        repeat answers ``noticed: false``. A hint only: the observe stays the evidence.
        404 ``attempt-not-in-stream`` when no command of the caller's stream names it."""
        svc = _svc(request)
        async with svc.sessions.begin() as session:
            store = PostgresSiteStore(session)
            grant = await _grant(store, request)
            noticed = await streams.notice_native_end(store, svc.events(session), grant,
                                                      attempt_id)
        return s.NativeEndNoticed(noticed=noticed)

    @router.post("/authorisations/execution", response_model=s.ExecutionAuthorised,
                 tags=["authorisations"])
    async def authorise_execution(request: Request, body: s.ExecutionAuthorisationRequest):
        """Check the request against the saved material and current authority; return the
        material. 403 ``authorisation-refused`` with a ``reason``. Never cached. With
        ``repository_grant``, also issue that repository grant in the same transaction
        (404/409 then may come from the grant, e.g. ``repository-not-served``; nothing
        is issued or kept when either part is refused)."""
        svc = _svc(request)
        grant: CommandGrant | None = None
        refused: list[Refusal] = []
        try:
            async with svc.sessions.begin() as session:
                store = PostgresSiteStore(session)
                grant = await _grant(store, request)
                verdict = await site_requests.authorise_execution(
                    store, svc.authority, grant, body.model_dump(exclude={"repository_grant"}))
                issued = None
                if body.repository_grant is not None:
                    # Only after a positive decision; a grant refusal rolls both back.
                    issued = await issue_recorded(svc, session, store, grant, body.attempt_id,
                                                  body.repository_grant, refused)
        except Refusal as refusal:
            if grant is not None and refused:  # the grant's refusal is a decision
                await record_refusal(svc, grant, body.attempt_id, body.repository_grant,
                                     refusal)
            raise
        return s.ExecutionAuthorised(**verdict, repository_grant=repository_grant(issued))

    @router.post("/authorisations/read", response_model=s.ReadPermit, tags=["authorisations"])
    async def authorise_read(request: Request, body: s.ReadAuthorisationRequest):
        """Issue a read permit for the exact Run, Attempt, viewer, read kind, path and byte limit."""
        svc = _svc(request)
        grant: CommandGrant | None = None
        try:
            async with svc.sessions.begin() as session:
                store = PostgresSiteStore(session)
                grant = await _grant(store, request)
                permit = await site_requests.authorise_read(store, svc.authority, grant,
                                                            body.model_dump(),
                                                            svc.settings.read_permit_seconds)
                # The issued permit's audit record commits with the permit.
                await audit.record_read_permit(
                    session, grant, body.model_dump(), permit=permit,
                    project=await audit.attempt_project(store, grant, body.attempt_id))
        except Refusal as refusal:
            if grant is not None:  # an authenticated caller's refusal is a decision
                async with svc.sessions.begin() as session:
                    await audit.record_read_permit(
                        session, grant, body.model_dump(), code=refusal.code,
                        project=await audit.attempt_project(PostgresSiteStore(session), grant,
                                                            body.attempt_id))
            raise
        return s.ReadPermit(**permit)

    @router.post("/read-permits/{permit_id}/check", response_model=s.ReadPermit,
                 tags=["authorisations"])
    async def check_read_permit(request: Request,
                                permit_id: str = Path(min_length=1, max_length=128)):
        """Confirm a read permit on use: unexpired, in the caller's stream, and its viewer
        still authorised now (never cached)."""
        svc = _svc(request)
        async with svc.sessions.begin() as session:
            store = PostgresSiteStore(session)
            grant = await _grant(store, request)
            permit = await site_requests.check_read_permit(store, svc.authority, grant,
                                                           permit_id)
        return s.ReadPermit(**permit)

    @router.post("/attempts/{attempt_id}/member-token", response_model=s.MemberToken,
                 status_code=201, tags=["identity"])
    async def member_token(request: Request,
                           attempt_id: str = Path(min_length=1, max_length=128)):
        """A per-action member token (RS256, ≤ 3600 s) for the Attempt's saved member."""
        svc = _svc(request)
        async with svc.sessions.begin() as session:
            store = PostgresSiteStore(session)
            grant = await _grant(store, request)
            token, expires_at = await site_requests.issue_member_token(
                store, svc.authority, svc.issuer, grant, attempt_id,
                svc.settings.member_token_seconds)
        return s.MemberToken(token=token, expires_at=expires_at)

    add_repository_grant_routes(router, _svc, _grant)
    app.include_router(router)
    return app
