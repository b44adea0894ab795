"""The engine's pool on a real PostgreSQL: connections the server closed are replaced."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from metallo.persistence.engine import create_engine

pytestmark = pytest.mark.integration


async def _terminate(url: str, pid: int) -> None:
    """Terminate backend ``pid`` of ``url``'s database, wait until it has exited (its
    socket is then closed) and give the event loop a moment to read the close, as
    an idle pool would have."""
    admin = create_engine(url.rsplit("/", 1)[0] + "/postgres", pool_size=1)
    try:
        async with admin.connect() as conn:
            assert (await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})).scalar_one()
            for _ in range(100):
                gone = not (await conn.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid})).scalar_one()
                await conn.commit()  # pg_stat_activity is read once per transaction
                if gone:
                    break
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)
    finally:
        await admin.dispose()


@pytest.fixture
async def pool(make_database):
    """(database URL, an engine whose pool holds one connection) on a fresh database."""
    url = await make_database("engine")
    engine = create_engine(url, pool_size=1)
    yield url, engine
    await engine.dispose()


async def test_a_connection_closed_by_the_server_is_replaced_at_checkout(pool):
    url, engine = pool
    async with engine.connect() as conn:
        before = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
    await _terminate(url, before)  # the pooled, idle connection
    # No round-trip pre-ping: the pool sees the closed socket and connects anew,
    # so the next transaction does not fail.
    async with engine.connect() as conn:
        after = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
    assert after != before
    assert engine.pool.checkedout() == 0


async def test_checkout_sends_nothing_to_the_server(pool):
    # SQLAlchemy's pool_pre_ping would send BEGIN, ";" and ROLLBACK on every checkout
    # before the caller's own transaction.
    _url, engine = pool
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
        driver = (await conn.get_raw_connection()).driver_connection
    sent: list[str] = []
    driver.add_query_logger(lambda record: sent.append(record.query))
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 2"))
    assert ";" not in sent
    assert sent.count("BEGIN;") == 1, sent  # the caller's transaction only



async def test_a_service_warns_at_start_when_autovacuum_cannot_run(make_database, caplog,
                                                                   monkeypatch):
    # Without autovacuum, leases and outbox rows leave dead rows and stale statistics
    # behind (docs/operators.md). track_counts off (settable per database) stops
    # autovacuum whatever its own setting, so the warning can be forced here.
    import asyncpg

    from metallo.persistence.migrations import autovacuum_is_on, migrate
    from tests.integration.conftest import MIGRATIONS

    url = await make_database("autovacuum_check", MIGRATIONS)
    database = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(host="127.0.0.1", user="postgres", database="postgres")
    try:
        server_on = await admin.fetchval("SELECT current_setting('autovacuum') = 'on'")
        assert await autovacuum_is_on(url) is server_on
        await admin.execute(f'ALTER DATABASE "{database}" SET track_counts = off')
    finally:
        await admin.close()
    assert await autovacuum_is_on(url) is False
    caplog.set_level("WARNING", logger="metallo.persistence.migrations")
    monkeypatch.setattr("metallo.persistence.migrations._warned_servers", set())  # a new process
    await migrate(url, MIGRATIONS)
    assert "autovacuum is off" in caplog.text
