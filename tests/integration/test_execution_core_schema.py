"""The hand-kept Alembic revisions build exactly the tables the code declares."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from execution_core.adaptors.tables import metadata
from metallo.persistence.engine import create_engine
from tests.integration.execution_core_support import MIGRATIONS

pytestmark = pytest.mark.integration


async def test_migrations_match_the_declared_tables(make_database):
    url = await make_database("execution_core", MIGRATIONS)
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(MigrationContext.configure(c), metadata)
            )
    finally:
        await engine.dispose()
    assert diff == []


async def test_the_runs_due_notify_names_the_worker_it_concerns(make_database):
    """Migration 0006: an accepted Run made due notifies 'plan', a planned one 'supervise'."""
    import asyncio

    import asyncpg

    from execution_core.adaptors.tables import RUNS_DUE_CHANNEL
    from metallo.persistence.wakeups import driver_dsn

    url = await make_database("execution_core", MIGRATIONS)
    conn = await asyncpg.connect(driver_dsn(url))
    got: asyncio.Queue[str] = asyncio.Queue()
    try:
        await conn.add_listener(RUNS_DUE_CHANNEL, lambda *a: got.put_nowait(a[-1]))
        writer = await asyncpg.connect(driver_dsn(url))
        try:
            await writer.execute(
                "INSERT INTO runs (run_id, project, workload_id, revision, initiating_member,"
                " launch_command_id, phase, next_wake_at)"
                " VALUES ('r1', 'p', 'w', 1, 'm', 'c1', 'accepted', now())"
            )
            assert await asyncio.wait_for(got.get(), 10) == "plan"
            await writer.execute("UPDATE runs SET phase = 'planned', next_wake_at = now()")
            assert await asyncio.wait_for(got.get(), 10) == "supervise"
            await writer.execute("UPDATE runs SET phase = 'terminal', next_wake_at = now()")
            await asyncio.sleep(0.3)
            assert got.empty()  # a terminal Run wakes nobody
        finally:
            await writer.close()
    finally:
        await conn.close()
