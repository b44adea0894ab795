"""Builds the edge ASGI application from its parts (used by ``__main__``, tests and
the benchmark)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from metallo.identity.issuer import LabIssuer
from metallo.messaging import Outbox, Topology
from metallo.persistence.engine import create_engine, session_factory
from site_coordination.adaptors.deferral_catalogue import load_catalogue
from site_coordination.adaptors.edge.app import EdgeServices, EdgeSettings, create_app
from site_coordination.adaptors.edge.caller import caller_check
from site_coordination.adaptors.edge.limits import BodyLimits
from site_coordination.adaptors.edge.notifier import StreamNotifier
from site_coordination.adaptors.lab_git.app import LabGitApp, LabGitSettings, compose
from site_coordination.adaptors.lab_git.tokens import LabSourceControl
from site_coordination.adaptors.outbox_events import OutboxEvents
from site_coordination.application.ports import ProjectAuthority


def edge_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    """The edge's engine: ``metallo.persistence.engine.create_engine`` (no pre-ping
    round trip per checkout; a connection the server closed is replaced at
    checkout; one lost silently fails its one request with 503
    ``storage-unavailable`` and is replaced; recycled after 30 minutes).
    """
    return create_engine(url, pool_size=pool_size)


def build_edge(engine: AsyncEngine, database_url: str, topology: Topology, *,
               authority: ProjectAuthority, issuer: LabIssuer, deferrals_file: Path | None = None,
               settings: EdgeSettings | None = None, lab_git: LabGitSettings | None = None,
               draining: Callable[[], bool] | None = None):
    """The complete ASGI app: the edge (bounded bodies) plus, when ``lab_git`` is
    given, the lab Git server under ``/git/`` and ``/git-admin/``. ``draining()`` says
    the server is shutting down: long-polls then answer "no command" at once."""
    sessions = session_factory(engine)
    outbox = Outbox(topology)
    settings = settings or EdgeSettings()
    services = EdgeServices(
        sessions=sessions,
        autocommit_sessions=session_factory(engine.execution_options(isolation_level="AUTOCOMMIT")),
        events=lambda session: OutboxEvents(outbox, session),
        authority=authority,
        source_control=LabSourceControl,
        issuer=issuer,
        jwks=issuer.jwks,
        catalogue=load_catalogue(deferrals_file) if deferrals_file else load_catalogue(),
        notifier=StreamNotifier(database_url),
        settings=settings,
        **({"draining": draining} if draining is not None else {}),
    )
    edge = BodyLimits(create_app(services), max_bytes=settings.max_body_bytes,
                      max_depth=settings.max_json_depth, check=caller_check(sessions))
    git = LabGitApp(lab_git, sessions) if lab_git else None
    return compose(edge, git)
