"""Run a service's Alembic migrations from code (DESIGN.md, Persistence).

Each service keeps ``services/<service>/migrations/`` with ``env.py`` calling
:func:`run_env` and its revisions under ``versions/``. :func:`migrate` creates the
database when missing and upgrades it to ``head``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import MetaData, pool
from sqlalchemy.ext.asyncio import create_async_engine

from metallo.persistence.engine import ensure_database


def alembic_config(url: str, migrations_dir: Path) -> Config:
    """Build an Alembic Config for ``migrations_dir`` targeting ``url``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["metallo_url"] = url
    return cfg


def _upgrade(url: str, migrations_dir: Path, revision: str) -> None:
    command.upgrade(alembic_config(url, migrations_dir), revision)


async def migrate(url: str, migrations_dir: Path, revision: str = "head") -> None:
    """Create the database if needed and upgrade it to ``revision`` (default ``head``).

    Alembic's runner is synchronous and starts its own event loop in ``env.py``,
    so it runs in a worker thread.
    """
    await ensure_database(url)
    await asyncio.to_thread(_upgrade, url, Path(migrations_dir), revision)


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
