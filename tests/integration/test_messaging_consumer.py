"""QueueConsumer acks and shutdown on a real RabbitMQ."""

from __future__ import annotations

import asyncio
import logging
import zlib

import aio_pika
import pytest

from metallo.messaging.consumer import QueueConsumer
from metallo.messaging.envelope import encode
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.test_messaging_outbox import wait_for

pytestmark = pytest.mark.integration

ROUTING_KEY = "testkit.Deposited.v1"


async def publish(amqp_url: str, topology, aggregates: list[str]) -> None:
    """Publish one Deposited per entry of ``aggregates``, in that order."""
    conn = await aio_pika.connect(amqp_url)
    async with conn:
        ch = await conn.channel()
        ex = await ch.get_exchange(topology.events_exchange)
        for seq, account in enumerate(aggregates):
            await ex.publish(encode(tk.Deposited(account=account, amount=1, sequence=seq), aggregate_id=account), ROUTING_KEY)


async def waiting(amqp_url: str, queue: str) -> int:
    """Messages ready in ``queue`` (unacked ones are not counted until their channel closes)."""
    conn = await aio_pika.connect(amqp_url)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(queue, durable=True, passive=True)
        return q.declaration_result.message_count


def consumer(amqp_url, topology, name, **kw) -> QueueConsumer:
    return QueueConsumer(
        amqp_url, topology, topology.event_queue(name),
        exchange=topology.events_exchange, routing_keys=[ROUTING_KEY], **kw,
    )


def reached(items: list, n: int):
    """A wait_for predicate: ``items`` holds ``n`` entries."""

    async def check() -> bool:
        return len(items) >= n

    return check


def lane_of(aggregate: str, lanes: int) -> int:
    return zlib.crc32(aggregate.encode()) % lanes  # as QueueConsumer spreads deliveries


@pytest.fixture
def ack_frames(monkeypatch) -> list[bool]:
    """The ``multiple`` flag of every Basic.Ack the consumer sends (the acks still go out)."""
    sent: list[bool] = []
    real_ack = aio_pika.IncomingMessage.ack

    async def ack(self, multiple: bool = False):
        sent.append(multiple)
        return await real_ack(self, multiple=multiple)

    monkeypatch.setattr(aio_pika.IncomingMessage, "ack", ack)
    return sent


async def test_settled_deliveries_are_acked_together_and_none_is_left(amqp_url, topology, ack_frames):
    handled: list[int] = []

    async def handle_batch(envelopes):
        handled.extend(e.message.sequence for e in envelopes)

    async def handle(envelope, _incoming):
        handled.append(envelope.message.sequence)

    qc = consumer(amqp_url, topology, "coalesce", handle=handle, handle_batch=handle_batch, prefetch=64)
    await qc.start()  # declares the queue
    await qc.stop()
    await publish(amqp_url, topology, [f"acc{i % 30}" for i in range(300)])
    await qc.start()
    try:
        await wait_for(reached(handled, 300))
    finally:
        await qc.stop()
    assert sorted(handled) == list(range(300))
    assert await waiting(amqp_url, topology.event_queue("coalesce")) == 0  # every delivery was acked
    assert len(ack_frames) < 300 and any(ack_frames)  # several per Basic.Ack


async def test_a_slow_delivery_does_not_hold_back_the_acks_of_others(amqp_url, topology, ack_frames):
    """prefetch 8: were the others' acks held behind the slow one, delivery would stop after 8."""
    lanes = 2
    slow = "slow"
    others = [a for a in (f"acc{i}" for i in range(100)) if lane_of(a, lanes) != lane_of(slow, lanes)][:10]
    release = asyncio.Event()
    handled: list[str] = []

    async def handle(envelope, _incoming):
        if envelope.message.account == slow:
            await release.wait()
        handled.append(envelope.message.account)

    qc = consumer(amqp_url, topology, "slowlane", handle=handle, prefetch=8, lanes=lanes)
    await qc.start()
    try:
        await publish(amqp_url, topology, [slow] + [others[i % len(others)] for i in range(40)])
        await wait_for(reached(handled, 40))
        assert slow not in handled
        release.set()
        await wait_for(reached(handled, 41))
    finally:
        release.set()
        await qc.stop()
    assert await waiting(amqp_url, topology.event_queue("slowlane")) == 0


async def test_stop_lets_lanes_finish_then_closes_without_channel_errors(amqp_url, topology, caplog):
    handled: list[int] = []
    started = asyncio.Event()

    async def handle_batch(envelopes):
        started.set()
        await asyncio.sleep(0.2)  # a batch is in hand when stop() comes
        handled.extend(e.message.sequence for e in envelopes)

    async def handle(envelope, _incoming):
        await handle_batch([envelope])

    qc = consumer(amqp_url, topology, "stopping", handle=handle, handle_batch=handle_batch, max_batch=10)
    await qc.start()
    await publish(amqp_url, topology, [f"acc{i % 7}" for i in range(200)])
    await asyncio.wait_for(started.wait(), 10)
    with caplog.at_level(logging.WARNING):
        await qc.stop()
    assert handled, "a batch was in hand"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    # What was handled was acked; everything else is back in the queue.
    assert await waiting(amqp_url, topology.event_queue("stopping")) == 200 - len(handled)
