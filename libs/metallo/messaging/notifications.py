"""A bounded queue that receives every integration event (stand-in for the Go API's bridge).

In production the Go API binds its own queue to ``metallo.events`` with ``#`` to
push live updates to members. The development stack declares this one in its
place, so that an event with no platform consumer (``RunAccepted``,
``PipelineCompleted``, …) is routable: the outbox relay treats an unroutable
event as a failure and would retry it forever. The queue keeps at most
``max_length`` messages, dropping the oldest.
"""

from __future__ import annotations

from metallo.messaging.broker import durable_queue, make_broker, topic_exchange
from metallo.messaging.topology import Topology

QUEUE = "api_notifications.events"


async def declare_notifications_queue(amqp_url: str, topology: Topology, *, max_length: int = 100_000) -> str:
    """Declare ``<prefix>api_notifications.events`` bound to every event; return its name."""
    name = f"{topology.prefix}{QUEUE}"
    broker = make_broker(amqp_url)
    await broker.connect()
    try:
        exchange = await broker.declare_exchange(topic_exchange(topology.events_exchange))
        queue = await broker.declare_queue(
            durable_queue(name, {"x-max-length": max_length, "x-overflow": "drop-head"})
        )
        await queue.bind(exchange, routing_key="#")
    finally:
        await broker.stop()
    topology.declared_queues.add(name)
    return name
