"""Async engines and per-service databases (DESIGN.md, Persistence).

Every service owns one private database named ``metallo_<service>``. The URL
comes from ``METALLO_<SERVICE>_DATABASE_URL`` when set, otherwise from
``METALLO_POSTGRES_URL`` (server part, default ``postgresql+asyncpg://postgres@127.0.0.1:5432``)
plus the database name.
"""

from __future__ import annotations

import os
import re

import asyncpg
from sqlalchemy import event, exc
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

DEFAULT_SERVER_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432"
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def database_url(service: str, database: str | None = None) -> str:
    """Return the SQLAlchemy URL (``postgresql+asyncpg://…/metallo_<service>``) for a service.

    ``database`` overrides the database name (tests use throw-away names).
    """
    override = os.environ.get(f"METALLO_{service.upper()}_DATABASE_URL")
    if override and database is None:
        return override
    server = os.environ.get("METALLO_POSTGRES_URL", DEFAULT_SERVER_URL).rstrip("/")
    return f"{server}/{database or 'metallo_' + service}"


def _admin_dsn(url: str) -> tuple[str, str]:
    """Split a SQLAlchemy URL into an asyncpg DSN for the ``postgres`` database and the name."""
    parsed = make_url(url)
    name = parsed.database or ""
    if not _DB_NAME.match(name):
        raise ValueError(f"refusing database name {name!r}: expected [a-z_][a-z0-9_]*")
    admin = parsed.set(drivername="postgresql", database="postgres")
    return admin.render_as_string(hide_password=False), name


async def ensure_database(url: str) -> bool:
    """Create the database named in ``url`` when missing; return True when it was created.

    Raises ValueError for an unsafe database name and asyncpg errors when the
    server is unreachable.
    """
    dsn, name = _admin_dsn(url)
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if exists:
            return False
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        except asyncpg.DuplicateDatabaseError:
            return False  # a concurrent creator won; the database exists either way
        return True
    finally:
        await conn.close()


async def drop_database(url: str) -> None:
    """Drop the database named in ``url`` (forcing other sessions off); no error when absent."""
    dsn, name = _admin_dsn(url)
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def create_engine(url: str, *, pool_size: int = 10, echo: bool = False, recycle_seconds: int = 1800) -> AsyncEngine:
    """Create an async engine over asyncpg for ``url`` (bounded pool, liveness-checked checkout).

    A pooled connection is checked before use without a round trip: one whose
    socket the server closed (a PostgreSQL restart or ``pg_terminate_backend``
    sends FATAL and closes it) is discarded and replaced at checkout, so callers
    do not see it. SQLAlchemy's ``pool_pre_ping`` would instead spend three round
    trips (BEGIN, ``;``, ROLLBACK) per checkout — more than a short transaction's
    own work (docs/decisions/0008). A connection lost silently (no FIN) fails its
    one transaction and is replaced; none lives longer than ``recycle_seconds``.
    """
    engine = _create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        pool_recycle=recycle_seconds,
        echo=echo,
    )
    event.listen(engine.sync_engine, "checkout", _discard_closed)
    return engine


def _discard_closed(dbapi_connection, _record, _proxy) -> None:
    """Pool ``checkout`` hook: a connection closed by the server is replaced (the
    pool retries the checkout on DisconnectionError)."""
    if dbapi_connection.driver_connection.is_closed():
        raise exc.DisconnectionError("connection closed by the server; replaced")


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Return a session factory whose sessions keep objects usable after commit."""
    return async_sessionmaker(engine, expire_on_commit=False)
