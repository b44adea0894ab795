"""Outbox delivery under failure on real PostgreSQL and RabbitMQ: a broker outage,
a consumer killed before its ack, two relays at once, a reused message id, batch
handlers — nothing is lost and nothing has a second effect."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import pytest

from metallo.messaging import EventConsumer, OutboxRelay
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.ledger.proxy import TcpProxy
from tests.integration.ledger.service import count_effects, effect_recorder, effect_rows
from tests.integration.outbox_support import (
    count_effects_is,
    dispatch_states,
    states_are,
    wait_for,
    write_events,
)

pytestmark = pytest.mark.integration


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
