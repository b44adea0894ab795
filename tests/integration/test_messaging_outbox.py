"""Outbox → relay → broker → inbox on real PostgreSQL and RabbitMQ: what is written
with a transaction goes out, in aggregate order, and only when it commits."""

from __future__ import annotations

import uuid

import aio_pika
import pytest
from sqlalchemy import text

from metallo.messaging import Outbox, OutboxRelay
from metallo.persistence.engine import session_factory
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.ledger.service import effect_recorder, effect_rows
from tests.integration.outbox_support import (
    count_effects_is,
    states_are,
    wait_for,
    write_events,
)

pytestmark = pytest.mark.integration


async def test_only_committed_messages_are_published_in_aggregate_order(ledger_engine, amqp_url, topology):
    consumer = effect_recorder("audit", ledger_engine, amqp_url, topology)
    await consumer.start()
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="t")
    await relay.start()
    try:
        await write_events(ledger_engine, topology, "rolled-back", [1, 2], rollback=True)
        # Interleave two aggregates across many transactions.
        for i in range(1, 21):
            await write_events(ledger_engine, topology, "a", [i])
            await write_events(ledger_engine, topology, "b", [i])
        await wait_for(lambda: count_effects_is(ledger_engine, 40))
        rows = await effect_rows(ledger_engine, "audit")
        assert [s for acc, s in rows if acc == "a"] == list(range(1, 21))
        assert [s for acc, s in rows if acc == "b"] == list(range(1, 21))
        assert not [r for r in rows if r[0] == "rolled-back"]
        await wait_for(lambda: states_are(ledger_engine, {"done": 40}))  # settled ≤ linger later
    finally:
        await relay.stop()
        await consumer.stop()


async def test_outbox_rows_live_and_die_with_the_transaction_and_its_savepoints(ledger_engine, topology):
    """The first write of a transaction goes through SQLAlchemy, later ones run on its
    driver connection: all of them belong to the one transaction."""
    outbox = Outbox(topology)

    async def deposit(session, seq: int) -> None:
        await outbox.publish_event(session, tk.Deposited(account="s", amount=1, sequence=seq), aggregate_id="s")

    async with session_factory(ledger_engine)() as session:
        async with session.begin():
            await deposit(session, 1)
            async with session.begin_nested() as savepoint:
                await deposit(session, 2)
                await savepoint.rollback()
            await deposit(session, 3)
        async with session.begin():  # the same session, a new transaction
            await deposit(session, 4)
            await deposit(session, 5)
            await session.rollback()
        async with session.begin():
            await deposit(session, 6)
    async with ledger_engine.connect() as conn:
        bodies = (await conn.execute(text("SELECT body FROM outbox_messages ORDER BY id"))).scalars().all()
        dispatch = (await conn.execute(text("SELECT count(*) FROM outbox_dispatch"))).scalar_one()
    assert [tk.Deposited.FromString(b).sequence for b in bodies] == [1, 3, 6]
    assert dispatch == 3


async def test_publish_events_writes_many_in_order_with_the_transaction_and_its_savepoints(ledger_engine, topology):
    """publish_events: one statement for several events, the same rows and order as
    one publish_event each, living and dying with the transaction or savepoint."""
    outbox = Outbox(topology)

    def deposits(*seqs: int) -> list[tuple[tk.Deposited, str]]:
        return [(tk.Deposited(account=f"acc{q % 3}", amount=1, sequence=q), f"acc{q % 3}") for q in seqs]

    sessions = session_factory(ledger_engine)
    async with sessions() as session:
        async with session.begin():
            ids = await outbox.publish_events(session, deposits(1, 2, 3))  # the transaction's first statement
            assert len(set(ids)) == 3
            await outbox.publish_event(session, *deposits(4)[0][:1], aggregate_id="acc1")
            async with session.begin_nested() as savepoint:
                await outbox.publish_events(session, deposits(5, 6))
                await savepoint.rollback()
            async with session.begin_nested():
                await outbox.publish_events(session, deposits(7, 8))
            await outbox.publish_events(session, deposits(9))
            await outbox.publish_events(session, [])
        async with session.begin():
            await outbox.publish_events(session, deposits(10, 11))
            await session.rollback()
        with pytest.raises(TypeError):
            async with session.begin():
                await outbox.publish_events(session, [(tk.Deposited(account="x", sequence=12), uuid.uuid4())])
    async with ledger_engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT m.message_id, m.body, d.aggregate_id FROM outbox_messages m "
            "JOIN outbox_dispatch d ON d.message_pk = m.id ORDER BY m.id"))).all()
    assert [tk.Deposited.FromString(body).sequence for _, body, _ in rows] == [1, 2, 3, 4, 7, 8, 9]
    assert [r[0] for r in rows[:3]] == ids
    assert [aggregate for _, _, aggregate in rows] == ["acc1", "acc2", "acc0", "acc1", "acc1", "acc2", "acc0"]


async def test_late_commit_is_never_skipped(ledger_engine, amqp_url, topology):
    """A transaction that took its row id early but commits after later rows is still published."""
    consumer = effect_recorder("late", ledger_engine, amqp_url, topology)
    await consumer.start()
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="t", poll_seconds=0.1)
    await relay.start()
    outbox = Outbox(topology)
    try:
        async with session_factory(ledger_engine)() as slow:
            await slow.begin()
            await outbox.publish_event(slow, tk.Deposited(account="slow", amount=1, sequence=1), aggregate_id="slow")
            await write_events(ledger_engine, topology, "fast", [1, 2, 3])
            await wait_for(lambda: count_effects_is(ledger_engine, 3))
            await slow.commit()
        await wait_for(lambda: count_effects_is(ledger_engine, 4))
        assert ("slow", 1) in await effect_rows(ledger_engine, "late")
    finally:
        await relay.stop()
        await consumer.stop()


async def test_unroutable_event_is_a_failure_and_stays_pending(ledger_engine, amqp_url, topology):
    """No queue bound: the Return makes it a failure even though the broker acks."""
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="t")
    await write_events(ledger_engine, topology, "nobody-listens", [1])
    published = await relay.run_once()
    await relay.stop()
    assert published == 0
    async with ledger_engine.connect() as conn:
        row = (await conn.execute(text("SELECT state, attempts, last_error, next_attempt_at > now() FROM outbox_dispatch"))).one()
    assert row[0] == "pending" and row[1] == 1
    assert "unroutable" in row[2]
    assert row[3] is True  # backed off


async def test_notifications_queue_makes_unconsumed_events_routable(ledger_engine, amqp_url, topology):
    from metallo.messaging.notifications import declare_notifications_queue

    name = await declare_notifications_queue(amqp_url, topology, max_length=10)
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="t")
    await write_events(ledger_engine, topology, "no-consumer", range(1, 13))
    published = 0
    for _ in range(20):
        published += await relay.run_once()
        if published == 12:
            break
    await relay.stop()
    assert published == 12
    conn = await aio_pika.connect(amqp_url)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(name, durable=True, passive=True)
        assert q.declaration_result.message_count == 10  # bounded: the oldest two were dropped
