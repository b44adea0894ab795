"""NOTIFY wake-ups of polling workers (DESIGN.md, Persistence)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from metallo.persistence import create_engine
from metallo.persistence.polling import PollingWorker
from metallo.persistence.wakeups import WakeListener

pytestmark = pytest.mark.integration

CHANNEL = "test_work_due"


class TableWorker(PollingWorker):
    """Takes every row of ``work`` per pass; polls only once a minute."""

    owner = "table-worker"

    def __init__(self, engine) -> None:
        self.engine = engine
        self.taken: list[int] = []
        self.passes = 0

    @property
    def poll_seconds(self) -> float:
        return 60.0

    async def run_once(self) -> int:
        self.passes += 1
        async with self.engine.begin() as conn:
            rows = (await conn.execute(text("DELETE FROM work RETURNING id"))).scalars().all()
        self.taken.extend(rows)
        return len(rows)


@pytest.fixture
async def engine(make_database):
    eng = create_engine(await make_database("wakeups"))
    async with eng.begin() as conn:
        await conn.execute(text("CREATE TABLE work (id int PRIMARY KEY)"))
    yield eng
    await eng.dispose()


async def until(predicate, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_a_committed_notify_wakes_an_idle_worker_and_a_rollback_does_not(engine):
    worker = TableWorker(engine)
    listener = WakeListener(engine.url, CHANNEL, worker.wake)
    await worker.start()
    await listener.start()
    try:
        await asyncio.wait_for(listener.connected.wait(), 10)
        await until(lambda: worker.passes >= 1)
        # Rolled back: no row and no notification (NOTIFY is transactional).
        async with engine.connect() as conn:
            trans = await conn.begin()
            await conn.execute(text("INSERT INTO work VALUES (1)"))
            await conn.execute(text(f"NOTIFY {CHANNEL}"))
            await trans.rollback()
        await asyncio.sleep(0.5)
        passes = worker.passes
        assert worker.taken == []
        # Committed: the idle worker (60 s poll) takes the row well within 10 s.
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO work VALUES (2)"))
            await conn.execute(text(f"NOTIFY {CHANNEL}"))
        await until(lambda: worker.taken == [2])
        assert worker.passes > passes
    finally:
        await listener.stop()
        await worker.stop()


async def test_the_listener_reconnects_and_wakes_once_more(engine):
    woken: list[int] = []
    listener = WakeListener(engine.url, CHANNEL, lambda: woken.append(1), retry_seconds=0.1)
    await listener.start()
    try:
        await asyncio.wait_for(listener.connected.wait(), 10)
        after_connect = len(woken)
        assert after_connect == 1  # the look after connecting
        # Kill the listening backend as a database restart would.
        async with engine.begin() as conn:
            killed = await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
                )
            )
            assert killed.scalars().all() == [True]
        await until(lambda: len(woken) >= 2)  # reconnected, looked once more
        await asyncio.wait_for(listener.connected.wait(), 10)
        async with engine.begin() as conn:
            await conn.execute(text(f"NOTIFY {CHANNEL}"))
        await until(lambda: len(woken) >= 3)
    finally:
        await listener.stop()


async def test_stop_ends_an_idle_wait_at_once(engine):
    worker = TableWorker(engine)
    await worker.start()
    await until(lambda: worker.passes >= 1)
    await asyncio.wait_for(worker.stop(), 5)


async def test_payload_listener_gets_each_payload_and_empty_after_connect(engine):
    payloads: list[str] = []
    listener = WakeListener(engine.url, CHANNEL, payloads.append, payload=True)
    await listener.start()
    try:
        await asyncio.wait_for(listener.connected.wait(), 10)
        assert payloads == [""]  # the look after connecting concerns every worker
        async with engine.begin() as conn:
            await conn.execute(text(f"NOTIFY {CHANNEL}, 'plan'"))
            await conn.execute(text(f"NOTIFY {CHANNEL}, 'supervise'"))
            await conn.execute(text(f"NOTIFY {CHANNEL}, 'plan'"))  # folded at commit
        await until(lambda: len(payloads) >= 3)
        await asyncio.sleep(0.2)
        assert payloads == ["", "plan", "supervise"]
    finally:
        await listener.stop()
