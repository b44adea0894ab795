"""The outbox's dispatch rows on real PostgreSQL: the relay's claim stays linear,
published rows are pruned after their retention, and a deferred batch is settled."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from metallo.messaging import OutboxRelay
from tests.integration.ledger.service import effect_recorder, effect_rows
from tests.integration.outbox_support import (
    count_effects_is,
    dispatch_states,
    wait_for,
    write_events,
)

pytestmark = pytest.mark.integration


async def _add_outbox_rows(conn, count: int, *, aggregates: int = 500) -> None:
    await conn.execute(
        text(
            """
WITH m AS (
    INSERT INTO outbox_messages (message_id, aggregate_id, kind, exchange, routing_key, type, body)
    SELECT gen_random_uuid(), 'acc' || (g % :aggregates), 'event', 'x', 'k', 't', '\\x00'::bytea
    FROM generate_series(1, :count) g
    RETURNING id, aggregate_id)
INSERT INTO outbox_dispatch (message_pk, aggregate_id) SELECT id, aggregate_id FROM m
"""
        ),
        {"count": count, "aggregates": aggregates},
    )


async def _claim_buffer_hits(conn) -> int:
    """Shared buffers the relay's claim touches, by EXPLAIN (ANALYZE, BUFFERS); rolled back."""
    from metallo.messaging.dispatch_rows import _CHAIN, _CLAIM

    params = {"batch": 500, "chain": _CHAIN, "owner": "t", "token": uuid.uuid4(), "lease_seconds": 30}
    async with conn.begin_nested() as savepoint:
        plan = (await conn.execute(text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _CLAIM.text), params)).scalar_one()
        await savepoint.rollback()
    return plan[0]["Plan"]["Shared Hit Blocks"]


async def test_claim_work_stays_linear_when_statistics_say_nothing_is_pending(ledger_engine):
    # After a quiet spell, autovacuum's statistics say no row is pending; a burst
    # then used to make the claim join the pending rows with themselves (seconds
    # per claim at 5000 rows: the relay fell far behind its writers).
    async with ledger_engine.connect() as conn:
        await _add_outbox_rows(conn, 20_000)
        await conn.execute(text("UPDATE outbox_dispatch SET state = 'done'"))
        await conn.commit()
    async with ledger_engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE outbox_dispatch"))
    async with ledger_engine.connect() as conn:
        await _add_outbox_rows(conn, 1000)
        await conn.commit()
        few = await _claim_buffer_hits(conn)
        await _add_outbox_rows(conn, 3000)
        await conn.commit()
        many = await _claim_buffer_hits(conn)
    # Linear: a few buffer visits per added pending row (it was thousands: 773,132
    # buffer hits at 1000 pending rows, 11,294,725 at 4000, before the rewrite).
    assert many - few < 20 * 3000, (few, many)


async def test_published_rows_are_pruned_after_the_retention_and_others_kept(ledger_engine, amqp_url, topology):
    async with ledger_engine.connect() as conn:
        await _add_outbox_rows(conn, 40, aggregates=4)
        # 10 published long ago, 10 published just now, 10 dead long ago, 10 pending
        await conn.execute(text("""
            UPDATE outbox_dispatch SET
              state = CASE WHEN message_pk % 4 = 0 THEN 'done' WHEN message_pk % 4 = 1 THEN 'done'
                           WHEN message_pk % 4 = 2 THEN 'dead' ELSE 'pending' END,
              published_at = CASE WHEN message_pk % 4 = 1 THEN now() WHEN message_pk % 4 = 0 THEN now() - interval '8 days' END,
              next_attempt_at = CASE WHEN message_pk % 4 = 2 THEN now() - interval '8 days' ELSE next_attempt_at END"""))
        await conn.commit()
    relay = OutboxRelay(ledger_engine, amqp_url, topology, keep_published_seconds=7 * 86400)
    assert await relay.prune(limit=4) == 4  # bounded batches
    assert await relay.prune() == 6
    assert await relay.prune() == 0
    assert await dispatch_states(ledger_engine) == {"done": 10, "dead": 10, "pending": 10}
    async with ledger_engine.connect() as conn:
        messages = (await conn.execute(text("SELECT count(*) FROM outbox_messages"))).scalar_one()
        orphans = (await conn.execute(text(
            "SELECT count(*) FROM outbox_messages m WHERE NOT EXISTS "
            "(SELECT 1 FROM outbox_dispatch d WHERE d.message_pk = m.id)"))).scalar_one()
    assert (messages, orphans) == (30, 0)


async def test_an_idle_relay_prunes_on_its_own(ledger_engine, amqp_url, topology):
    async with ledger_engine.connect() as conn:
        await _add_outbox_rows(conn, 20, aggregates=2)
        await conn.execute(text("UPDATE outbox_dispatch SET state = 'done', published_at = now() - interval '2 hours'"))
        await conn.commit()
    relay = OutboxRelay(ledger_engine, amqp_url, topology, keep_published_seconds=3600, poll_seconds=0.05)
    await relay.start()
    try:
        await wait_for(lambda: _count_rows(ledger_engine, "outbox_messages", expect=0), timeout=10)
    finally:
        await relay.stop()
    assert await dispatch_states(ledger_engine) == {}


async def _count_rows(engine, table: str, *, expect: int) -> bool:
    async with engine.connect() as conn:
        return (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one() == expect


async def leased_pending(engine) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(text(
            "SELECT count(*) FROM outbox_dispatch WHERE state = 'pending' "
            "AND lease_token IS NOT NULL"))).scalar_one()


async def test_a_deferred_batch_is_settled_by_the_next_claim_or_by_settle(
    ledger_engine, amqp_url, topology
):
    """``run_once(defer_settle=True)`` leaves a batch confirmed whole leased and pending;
    the next claim's transaction marks it ``done``, and so does :meth:`settle`."""
    consumer = effect_recorder("settle", ledger_engine, amqp_url, topology)
    await consumer.start()
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="t")
    try:
        await write_events(ledger_engine, topology, "z", [1])
        assert await relay.run_once(defer_settle=True) == 1
        assert await leased_pending(ledger_engine) == 1  # published, not yet done
        await write_events(ledger_engine, topology, "z", [2])  # same aggregate: next in line
        assert await relay.run_once(defer_settle=True) == 1  # claimable: the first is done
        assert await dispatch_states(ledger_engine) == {"done": 1, "pending": 1}
        assert await relay.run_once(defer_settle=True) == 0  # nothing new, but it settles
        assert await dispatch_states(ledger_engine) == {"done": 2}
        await write_events(ledger_engine, topology, "z", [3])
        assert await relay.run_once(defer_settle=True) == 1
        await relay.settle()
        assert await dispatch_states(ledger_engine) == {"done": 3}
        await wait_for(lambda: count_effects_is(ledger_engine, 3))
        assert [s for _, s in await effect_rows(ledger_engine, "settle")] == [1, 2, 3]
    finally:
        await relay.stop()
        await consumer.stop()


async def test_stop_settles_the_batch_that_waits(ledger_engine, amqp_url, topology):
    consumer = effect_recorder("stopsettle", ledger_engine, amqp_url, topology)
    await consumer.start()  # a bound queue: the events are routable
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="t")
    try:
        await write_events(ledger_engine, topology, "y", [1, 2])
        assert await relay.run_once(defer_settle=True) == 2
        assert await leased_pending(ledger_engine) == 2
        await relay.stop()  # else they would go out again once their lease ended
        assert await dispatch_states(ledger_engine) == {"done": 2}
    finally:
        await consumer.stop()
