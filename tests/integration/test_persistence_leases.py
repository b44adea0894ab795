"""Fenced leases on the PostgreSQL clock."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, Text, select, text

from metallo.persistence import (
    LeaseLost,
    claim_rows,
    create_engine,
    ensure_database,
    fenced_update,
    release,
)
from metallo.persistence.engine import session_factory
from metallo.persistence.leases import lease_columns

pytestmark = pytest.mark.integration

meta = MetaData()
work = Table("work", meta, Column("id", Integer, primary_key=True), Column("state", Text), *lease_columns())


@pytest.fixture
async def engine(make_database):
    url = await make_database("leases")
    eng = create_engine(url)
    async with eng.begin() as conn:
        await conn.run_sync(meta.create_all)
        await conn.execute(work.insert(), [{"id": i, "state": "ready"} for i in range(1, 11)])
    yield eng
    await eng.dispose()


async def claim(engine, owner: str, limit: int = 5, lease: float = 30.0):
    async with session_factory(engine)() as s, s.begin():
        return await claim_rows(s, work, ready=work.c.state == "ready", owner=owner, lease_seconds=lease, limit=limit)


async def test_ensure_database_is_idempotent(make_database):
    url = await make_database("idem")
    assert await ensure_database(url) is False


async def test_concurrent_claims_never_overlap(engine):
    results = await asyncio.gather(*(claim(engine, f"w{i}", limit=3) for i in range(5)))
    keys = [c.key for batch in results for c in batch]
    assert len(keys) == len(set(keys)) == 10


async def test_fenced_update_refused_after_takeover(engine):
    [first] = await claim(engine, "slow", limit=1, lease=0.2)
    await asyncio.sleep(0.4)  # the lease expires on the database clock
    [second] = await claim(engine, "fast", limit=1)
    assert second.key == first.key and second.generation == first.generation + 1
    async with session_factory(engine)() as s, s.begin():
        with pytest.raises(LeaseLost):
            await fenced_update(s, work, first, state="done-by-slow")
    async with session_factory(engine)() as s, s.begin():
        await release(s, work, second, state="done")
    async with engine.connect() as conn:
        row = (await conn.execute(select(work.c.state, work.c.lease_token).where(work.c.id == first.key))).one()
    assert row == ("done", None)


async def test_held_lease_blocks_other_claimers_and_extends(engine):
    held = await claim(engine, "a", limit=10, lease=0.3)
    assert len(held) == 10
    async with session_factory(engine)() as s, s.begin():
        await fenced_update(s, work, held[0], extend_seconds=30)
    await asyncio.sleep(0.5)
    again = await claim(engine, "b", limit=10)
    assert held[0].key not in {c.key for c in again} and len(again) == 9
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM work WHERE lease_owner = 'b'"))).scalar() == 9
