"""Run a service's Alembic migrations from code (DESIGN.md, Persistence).

Each service keeps ``services/<service>/migrations/`` with ``env.py`` calling
:func:`run_env` and its revisions under ``versions/``. :func:`migrate` creates the
database when missing, upgrades it to ``head`` and warns when PostgreSQL's
autovacuum cannot run there — once per server and process, and not at all when told
the caller checked already (``check_autovacuum=False``, or
:data:`AUTOVACUUM_CHECKED_ENV` set by ``metallo dev up``, which checks once for the
whole stack).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import MetaData, pool, text
from sqlalchemy.ext.asyncio import create_async_engine

from metallo.persistence.engine import ensure_database

log = logging.getLogger(__name__)

# Set to "1" in a service's environment by a launcher that checked autovacuum itself
# and told its user (``metallo dev up``): the service's own migration then does not
# repeat the warning. A service started on its own has it unset and warns.
AUTOVACUUM_CHECKED_ENV = "METALLO_AUTOVACUUM_CHECKED"


# The servers (host, port) this process has warned about: a process says it once per
# server, however many databases it migrates there (a benchmark makes several).
_warned_servers: set[tuple[str, int]] = set()


def autovacuum_warning(url: str) -> str:
    """The one-line warning when autovacuum cannot run on the server of ``url``, with
    the command that turns it on there (``psql`` as the URL's user, who must be a
    superuser; the password, if any, is never part of it)."""
    from sqlalchemy.engine import make_url

    parts = make_url(url)
    psql = ["psql"]
    if parts.host:
        psql += ["-h", parts.host]
    if parts.port:
        psql += ["-p", str(parts.port)]
    if parts.username:
        psql += ["-U", parts.username]
    fix = " ".join([*psql, "-d", "postgres", "-c", "'ALTER SYSTEM SET autovacuum = on'",
                    "-c", "'ALTER SYSTEM SET track_counts = on'", "-c",
                    "'SELECT pg_reload_conf()'"])
    return ("PostgreSQL's autovacuum is off, so dead rows pile up and polling slows down; "
            f"turn it on: {fix} (docs/operators.md, PostgreSQL)")


def warn_once_per_server(url: str) -> bool:
    """True the first time this process is about to warn about ``url``'s server
    (host and port), False after that."""
    from sqlalchemy.engine import make_url

    parts = make_url(url)
    server = (parts.host or "", parts.port or 5432)
    if server in _warned_servers:
        return False
    _warned_servers.add(server)
    return True


#: Taken in the migration's transaction (released at its commit or rollback): concurrent
#: upgrades of one database run one after another.
MIGRATION_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended('metallo:migrations', 0))")


def alembic_config(url: str, migrations_dir: Path) -> Config:
    """Build an Alembic Config for ``migrations_dir`` targeting ``url``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["metallo_url"] = url
    return cfg


def _upgrade(url: str, migrations_dir: Path, revision: str) -> None:
    command.upgrade(alembic_config(url, migrations_dir), revision)


async def migrate(url: str, migrations_dir: Path, revision: str = "head", *,
                  check_autovacuum: bool | None = None) -> None:
    """Create the database if needed and upgrade it to ``revision`` (default ``head``),
    then log :func:`autovacuum_warning` when autovacuum cannot run on that database —
    once per server in this process (:func:`warn_once_per_server`).

    ``check_autovacuum``: None (default) checks unless :data:`AUTOVACUUM_CHECKED_ENV` is
    "1"; False never checks (the caller did, e.g. once for several databases); True
    always does. Alembic's runner is synchronous and starts its own event loop in
    ``env.py``, so it runs in a worker thread.
    """
    await ensure_database(url)
    await asyncio.to_thread(_upgrade, url, Path(migrations_dir), revision)
    if check_autovacuum is None:
        check_autovacuum = os.environ.get(AUTOVACUUM_CHECKED_ENV) != "1"
    if check_autovacuum and not await autovacuum_is_on(url) and warn_once_per_server(url):
        log.warning(autovacuum_warning(url))


async def autovacuum_is_on(url: str) -> bool:
    """Whether the server at ``url`` runs autovacuum (``autovacuum`` and ``track_counts``
    on; it needs both). Raises the driver's errors when the server cannot be asked."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(text(
                "SELECT current_setting('autovacuum') = 'on'"
                " AND current_setting('track_counts') = 'on'"))).scalar_one()
    finally:
        await engine.dispose()
    return bool(row)


def run_env(target_metadata: MetaData | None = None) -> None:
    """Body of a service's Alembic ``env.py``: run migrations online over asyncpg."""
    from alembic import context

    url = context.config.attributes.get("metallo_url") or context.config.get_main_option(
        "sqlalchemy.url"
    )

    def do_run(connection) -> None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            # Replicas start together and each migrates: one at a time per database, and
            # each reads the version only once it holds the lock (a second upgrade to the
            # same head then finds nothing to do).
            connection.execute(MIGRATION_LOCK)
            context.run_migrations()

    async def run_async() -> None:
        engine = create_async_engine(url, poolclass=pool.NullPool)
        async with engine.connect() as conn:
            await conn.run_sync(do_run)
        await engine.dispose()

    asyncio.run(run_async())
