"""Outbox → relay → broker → inbox on real PostgreSQL and RabbitMQ (issue 2, item 7)."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import pytest
from sqlalchemy import text

from metallo.messaging import EventConsumer, Outbox, OutboxRelay
from metallo.persistence.engine import session_factory
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.ledger.proxy import TcpProxy
from tests.integration.ledger.service import count_effects, effect_recorder, effect_rows

pytestmark = pytest.mark.integration


async def write_events(engine, topology, account: str, sequences, *, rollback: bool = False) -> None:
    outbox = Outbox(topology)
    async with session_factory(engine)() as session, session.begin():
        for seq in sequences:
            await outbox.publish_event(
                session, tk.Deposited(account=account, amount=1, sequence=seq), aggregate_id=account
            )
        if rollback:
            await session.rollback()


async def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        await asyncio.sleep(interval)


async def dispatch_states(engine) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT state, count(*) FROM outbox_dispatch GROUP BY state"))
        return {state: n for state, n in rows}


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


async def states_are(engine, expected: dict[str, int]) -> bool:
    return await dispatch_states(engine) == expected


async def count_effects_is(engine, n: int) -> bool:
    return await count_effects(engine) == n


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


async def test_broker_outage_messages_wait_then_all_go_out(ledger_engine, amqp_url, topology):
    consumer = effect_recorder("outage", ledger_engine, amqp_url, topology)
    await consumer.start()
    proxy = TcpProxy("127.0.0.1", 5672)
    await proxy.start()
    relay = OutboxRelay(
        ledger_engine, amqp_url.replace("@127.0.0.1:5672/", f"@127.0.0.1:{proxy.port}/"),
        topology, owner="t",
        poll_seconds=0.1, publish_timeout=2.0,
    )
    await relay.start()
    try:
        await write_events(ledger_engine, topology, "x", [1, 2])
        await wait_for(lambda: count_effects_is(ledger_engine, 2))
        await proxy.cut()
        await write_events(ledger_engine, topology, "x", range(3, 13))
        await asyncio.sleep(1.5)
        states = await dispatch_states(ledger_engine)
        assert states.get("pending") == 10, states  # nothing lost, nothing hung
        await proxy.restore()
        await wait_for(lambda: count_effects_is(ledger_engine, 12), timeout=40)
        assert [s for _a, s in await effect_rows(ledger_engine, "outage")] == list(range(1, 13))
    finally:
        await relay.stop()
        await consumer.stop()
        await proxy.cut()


async def test_consumer_killed_after_effect_before_ack_has_one_effect(ledger_engine, amqp_url, topology, monkeypatch):
    first = effect_recorder("crashy", ledger_engine, amqp_url, topology)
    await first.start()
    crashed = asyncio.Event()
    real_ack = aio_pika.IncomingMessage.ack

    async def crash_instead_of_ack(self, *a, **kw):
        # The effect has committed; the process "dies" before acking.
        if not crashed.is_set():
            crashed.set()
            await first._consumer.broker._connection.close()
            return None
        return await real_ack(self, *a, **kw)

    monkeypatch.setattr(aio_pika.IncomingMessage, "ack", crash_instead_of_ack)
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="t", poll_seconds=0.1)
    await relay.start()
    try:
        await write_events(ledger_engine, topology, "k", [1])
        await asyncio.wait_for(crashed.wait(), 20)
        assert await count_effects(ledger_engine) == 1
        second = effect_recorder("crashy", ledger_engine, amqp_url, topology)
        await second.start()
        # The redelivery reaches the second consumer and is absorbed by the inbox.
        await wait_for(lambda: queue_empty(amqp_url, topology.event_queue("crashy")))
        assert await effect_rows(ledger_engine, "crashy") == [("k", 1)]
        await second.stop()
    finally:
        await relay.stop()


async def queue_empty(amqp_url: str, name: str) -> bool:
    conn = await aio_pika.connect(amqp_url)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(name, durable=True, passive=True)
        return q.declaration_result.message_count == 0 and q.declaration_result.consumer_count >= 1


async def test_two_relays_lose_nothing_and_inbox_absorbs_duplicates(ledger_engine, amqp_url, topology):
    consumer = effect_recorder("pair", ledger_engine, amqp_url, topology)
    await consumer.start()
    relays = [
        OutboxRelay(ledger_engine, amqp_url, topology, owner=f"r{i}", batch=7, poll_seconds=0.05) for i in range(2)
    ]
    for account in ("p", "q", "r"):
        await write_events(ledger_engine, topology, account, range(1, 31))
    for relay in relays:
        await relay.start()
    try:
        await wait_for(lambda: count_effects_is(ledger_engine, 90), timeout=40)
        rows = await effect_rows(ledger_engine, "pair")
        for account in ("p", "q", "r"):
            assert [s for a, s in rows if a == account] == list(range(1, 31))
        await wait_for(lambda: states_are(ledger_engine, {"done": 90}))
    finally:
        for relay in relays:
            await relay.stop()
        await consumer.stop()


async def test_same_message_id_with_other_bytes_is_dead_lettered(ledger_engine, amqp_url, topology):
    consumer = effect_recorder("strict", ledger_engine, amqp_url, topology)
    await consumer.start()
    try:
        conn = await aio_pika.connect(amqp_url)
        async with conn:
            ch = await conn.channel()
            ex = await ch.get_exchange(topology.events_exchange)
            from metallo.messaging.envelope import encode

            mid = str(uuid.uuid4())
            await ex.publish(encode(tk.Deposited(account="m", amount=1, sequence=1), message_id=mid), "testkit.Deposited.v1")
            await wait_for(lambda: count_effects_is(ledger_engine, 1))
            await ex.publish(encode(tk.Deposited(account="m", amount=9, sequence=2), message_id=mid), "testkit.Deposited.v1")
            dlq = await ch.declare_queue(topology.event_queue("strict") + ".dlq", durable=True, passive=True)
            got = await wait_for(lambda: dlq.get(fail=False, no_ack=True), timeout=10)
            assert "other bytes" in got.headers["x-metallo-dead-reason"]
        assert await count_effects(ledger_engine) == 1
    finally:
        await consumer.stop()


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


async def test_batch_handlers_take_runs_in_arrival_order_and_each_event_once(ledger_engine, amqp_url, topology):
    seen: list[tuple[str, int]] = []
    calls: list[int] = []
    consumer = EventConsumer("projection", ledger_engine, amqp_url, topology)

    @consumer.on_batch(tk.Deposited)
    async def project(session, events: list[tk.Deposited]) -> None:
        calls.append(len(events))
        seen.extend((e.account, e.sequence) for e in events)

    with pytest.raises(ValueError, match="already has a handler"):
        consumer.on(tk.Deposited)(project)
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="t", poll_seconds=0.1)
    await consumer.start()
    await relay.start()
    try:
        for account in ("p", "q", "r"):
            await write_events(ledger_engine, topology, account, range(20))

        async def all_seen() -> bool:
            return len(seen) >= 60

        await wait_for(all_seen)
        await asyncio.sleep(0.3)  # nothing more arrives: each event was applied once
        assert len(seen) == 60 and len(set(seen)) == 60 and sum(calls) == 60
        for account in ("p", "q", "r"):
            assert [s for a, s in seen if a == account] == list(range(20))
    finally:
        await relay.stop()
        await consumer.stop()


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
