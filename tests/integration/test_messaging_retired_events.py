"""A consumer that retires an event type drops it — queued before or published after —
without parking it as poison, and keeps it routable for an older publisher
(EventConsumer.retire; ADR 0014: Execution Core no longer consumes SiteCommandAppended)."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest

from metallo.messaging import EventConsumer
from metallo.messaging.envelope import encode
from metallo.messaging.topology import event_routing_key
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.test_messaging_consumer import waiting

pytestmark = pytest.mark.integration


async def publish_deposited(amqp_url: str, topology, sequence: int) -> bool:
    """Publish one Deposited (mandatory); True when some queue took it."""
    conn = await aio_pika.connect(amqp_url)
    returned: list = []
    async with conn:
        ch = await conn.channel(on_return_raises=False)
        ch.return_callbacks.add(lambda _ch, message: returned.append(message))
        ex = await ch.get_exchange(topology.events_exchange)
        await ex.publish(
            encode(tk.Deposited(account="a", amount=1, sequence=sequence), aggregate_id="a"),
            event_routing_key(tk.Deposited),
            mandatory=True,
        )
        await asyncio.sleep(0.3)  # a Basic.Return arrives after the confirm
    return not returned


async def test_retire_drops_what_is_queued_and_what_comes_and_keeps_it_routable(
    ledger_engine, amqp_url, topology
):
    seen: list[int] = []
    old = EventConsumer("retiring", ledger_engine, amqp_url, topology)

    @old.on(tk.Deposited)
    async def deposited(session, event):
        seen.append(event.sequence)

    await old.start()
    await old.stop()  # the durable queue keeps its binding while nobody consumes
    assert await publish_deposited(amqp_url, topology, 1)  # queued for the next version
    queue = topology.event_queue("retiring")
    assert await waiting(amqp_url, queue) == 1

    new = EventConsumer("retiring", ledger_engine, amqp_url, topology)
    new.retire(tk.Deposited)
    with pytest.raises(ValueError, match="cannot be retired"):
        old.retire(tk.Deposited)
    with pytest.raises(ValueError, match="cannot also handle"):
        new.on(tk.Deposited)(deposited)
    await new.start()
    try:
        # An older publisher's event stays routable (an unroutable one would hold up
        # its aggregate in that publisher's outbox) and is dropped like the queued one.
        assert await publish_deposited(amqp_url, topology, 2)
        for _ in range(100):
            if await waiting(amqp_url, queue) == 0:
                break
            await asyncio.sleep(0.05)
        assert await waiting(amqp_url, queue) == 0  # acked without effect…
        assert await waiting(amqp_url, f"{queue}.dlq") == 0  # …not parked as poison
    finally:
        await new.stop()
    assert seen == []
