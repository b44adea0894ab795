"""Run a service's Alembic migrations from code (DESIGN.md, Persistence).

Each service keeps ``services/<service>/migrations/`` with ``env.py`` calling
:func:`run_env` and its revisions under ``versions/``. :func:`migrate` creates the
database when missing, upgrades it to ``head`` and warns when PostgreSQL's
autovacuum cannot run there — unless told the caller checked already
(``check_autovacuum=False``, or :data:`AUTOVACUUM_CHECKED_ENV` set by ``metallo dev
up``, which checks once for the whole stack).
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


def autovacuum_warning(who: str = "this service updates") -> str:
    """The warning text when autovacuum is off; ``who`` completes "the leases and outbox
    rows <who> all the time" (e.g. "the services update")."""
    return ("PostgreSQL's autovacuum is off: the leases and outbox rows "
            f"{who} all the time leave dead rows and stale statistics behind, and every "
            "polling pass slows down as they grow (seen: 29,000 dead rows beside 2,000 live "
            "ones in `runs`). Turn it on (autovacuum = on) or run VACUUM ANALYZE "
            "regularly — docs/operators.md, PostgreSQL.")


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
    then log :func:`autovacuum_warning` when autovacuum cannot run on that database.

    ``check_autovacuum``: None (default) checks unless :data:`AUTOVACUUM_CHECKED_ENV` is
    "1"; False never checks (the caller did, e.g. once for several databases); True
    always does. Alembic's runner is synchronous and starts its own event loop in
    ``env.py``, so it runs in a worker thread.
    """
    await ensure_database(url)
    await asyncio.to_thread(_upgrade, url, Path(migrations_dir), revision)
    if check_autovacuum is None:
        check_autovacuum = os.environ.get(AUTOVACUUM_CHECKED_ENV) != "1"
    if check_autovacuum and not await autovacuum_is_on(url):
        log.warning(autovacuum_warning())


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
            context.run_migrations()

    async def run_async() -> None:
        engine = create_async_engine(url, poolclass=pool.NullPool)
        async with engine.connect() as conn:
            await conn.run_sync(do_run)
        await engine.dispose()

    asyncio.run(run_async())
