"""Queue consumption with bounded retries and dead-lettering (DESIGN.md, Messaging).

Every consumed queue ``Q`` has two companions:

- ``Q.retry``: a delivery whose handler raised is re-published there with a
  per-message TTL (exponential backoff); RabbitMQ dead-letters it back to ``Q``
  when the TTL ends. The try count travels in header ``x-metallo-retries``.
- ``Q.dlq``: after ``max_retries`` tries, or at once for a poison message
  (unknown type, wrong contract version, undecodable body, inbox hash mismatch),
  the delivery is parked there with header ``x-metallo-dead-reason``.

A delivery is acked only after its effect committed (or after it was parked),
so a crash redelivers it and the inbox absorbs the repeat. Deliveries of one
aggregate (header ``x-metallo-aggregate``) are handled one after another in
arrival order; different aggregates run concurrently in lanes, and a lane may
apply several waiting deliveries in one transaction.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable

from aio_pika.abc import AbstractIncomingMessage
from faststream.rabbit import RabbitBroker

from metallo.messaging.broker import durable_queue, make_broker, topic_exchange
from metallo.messaging.envelope import Envelope, decode
from metallo.messaging.errors import PoisonMessage
from metallo.messaging.relay import backoff_seconds
from metallo.messaging.topology import Topology

log = logging.getLogger(__name__)

Handler = Callable[[Envelope, AbstractIncomingMessage], Awaitable[None]]
BatchHandler = Callable[[list[Envelope]], Awaitable[None]]


class QueueConsumer:
    """Consumes one durable queue bound to ``exchange`` with ``routing_keys``.

    Deliveries are spread over ``lanes`` by aggregate (one aggregate always maps
    to one lane, so its deliveries are handled in arrival order). A lane takes up
    to ``max_batch`` waiting deliveries at a time:

    - ``handle(envelope, incoming)`` does one delivery's work; raising
      :class:`PoisonMessage` parks it, any other exception schedules a retry;
    - ``handle_batch(envelopes)``, when given, applies several at once (one
      transaction); if it raises, each delivery of the batch is handled alone.
      A lane waits up to ``linger_seconds`` for a batch to fill.
    """

    def __init__(
        self,
        amqp_url: str,
        topology: Topology,
        queue: str,
        *,
        exchange: str,
        routing_keys: list[str],
        handle: Handler,
        handle_batch: BatchHandler | None = None,
        prefetch: int = 64,
        lanes: int = 4,
        max_batch: int = 50,
        linger_seconds: float = 0.01,
        max_retries: int = 5,
        retry_base_seconds: float = 0.5,
    ):
        self.amqp_url = amqp_url
        self.topology = topology
        self.queue_name = queue
        self.exchange_name = exchange
        self.routing_keys = routing_keys
        self.handle = handle
        self.handle_batch = handle_batch
        self.prefetch = prefetch
        self.max_batch = max_batch if handle_batch else 1
        self.linger_seconds = linger_seconds
        self.max_retries = max_retries
        self.retry_base_seconds = retry_base_seconds
        self._broker: RabbitBroker | None = None
        self._queue = None
        self._consumer_tag: str | None = None
        self._lanes: list[asyncio.Queue] = [asyncio.Queue() for _ in range(lanes)]
        self._workers: list[asyncio.Task] = []

    async def start(self) -> None:
        """Connect (FastStream broker), declare the topology and start consuming; acks are manual."""
        broker = make_broker(self.amqp_url, prefetch=self.prefetch)
        await broker.connect()
        queue = await declare_consumer_queue(
            broker, self.topology, self.queue_name, self.exchange_name, self.routing_keys
        )
        self._workers = [asyncio.create_task(self._lane(q)) for q in self._lanes]
        # Consume on the broker's own channel with aio-pika's callback: it is called
        # in delivery order with no await before the lane hand-off, which keeps an
        # aggregate's deliveries in order (a FastStream subscriber's decode pipeline
        # may reorder concurrent deliveries).
        self._consumer_tag = await queue.consume(self._on_message)
        self._queue = queue
        self._broker = broker

    @property
    def broker(self) -> RabbitBroker:
        """The connected broker (for publishing replies beside the consumer)."""
        if self._broker is None:
            raise RuntimeError("consumer not started")
        return self._broker

    async def stop(self) -> None:
        """Stop consuming and close; deliveries not acked are redelivered later."""
        if self._broker is not None:
            try:
                await self._queue.cancel(self._consumer_tag)
            except Exception:  # the connection may already be gone
                pass
            await self._broker.stop()
            self._broker = None
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._workers = []

    async def _on_message(self, incoming: AbstractIncomingMessage) -> None:
        # Hand the delivery to its lane (no await before: order kept); acked there after commit.
        key = str((incoming.headers or {}).get("x-metallo-aggregate") or incoming.message_id or "")
        lane = zlib.crc32(key.encode()) % len(self._lanes)
        await self._lanes[lane].put(incoming)

    async def _lane(self, queue: asyncio.Queue) -> None:
        while True:
            batch = [await queue.get()]
            if self.max_batch > 1:
                # Linger briefly so a trickle of deliveries shares one transaction.
                deadline = asyncio.get_running_loop().time() + self.linger_seconds
                while len(batch) < self.max_batch:
                    remaining = deadline - asyncio.get_running_loop().time()
                    if queue.empty() and remaining <= 0:
                        break
                    try:
                        batch.append(queue.get_nowait() if not queue.empty() else await asyncio.wait_for(queue.get(), remaining))
                    except TimeoutError:
                        break
            try:
                await self._process_batch(batch)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one batch kill the lane
                log.exception("%s: unexpected failure handling a batch", self.queue_name)

    async def _process_batch(self, batch: list[AbstractIncomingMessage]) -> None:
        decoded: list[tuple[Envelope, AbstractIncomingMessage]] = []
        for incoming in batch:
            try:
                decoded.append((decode(incoming), incoming))
            except PoisonMessage as exc:
                log.error("dead-lettering %s from %s: %s", incoming.message_id, self.queue_name, exc.reason)
                await self._park(incoming, exc.reason)
        if len(decoded) > 1 and self.handle_batch is not None:
            try:
                await self.handle_batch([env for env, _ in decoded])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("%s: batch of %d fell back to one by one (%s)", self.queue_name, len(decoded), exc)
            else:
                for _env, incoming in decoded:
                    await incoming.ack()
                return
        for envelope, incoming in decoded:
            await self._process(envelope, incoming)

    async def _process(self, envelope: Envelope, incoming: AbstractIncomingMessage) -> None:
        try:
            await self.handle(envelope, incoming)
        except PoisonMessage as exc:
            log.error("dead-lettering %s from %s: %s", incoming.message_id, self.queue_name, exc.reason)
            await self._park(incoming, exc.reason)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._retry(incoming, f"{type(exc).__name__}: {exc}")
            return
        await incoming.ack()

    async def _park(self, incoming: AbstractIncomingMessage, reason: str) -> None:
        headers = dict(incoming.headers or {})
        headers["x-metallo-dead-reason"] = reason[:500]
        headers["x-metallo-source-queue"] = self.queue_name
        await self._republish(incoming, f"{self.queue_name}.dlq", headers)
        await incoming.ack()

    async def _retry(self, incoming: AbstractIncomingMessage, error: str) -> None:
        headers = dict(incoming.headers or {})
        tries = int(headers.get("x-metallo-retries") or 0) + 1
        if tries > self.max_retries:
            log.error("giving up on %s from %s after %d tries: %s", incoming.message_id, self.queue_name, tries - 1, error)
            await self._park(incoming, f"failed {tries - 1} times; last error: {error}")
            return
        headers["x-metallo-retries"] = tries
        headers["x-metallo-last-error"] = error[:500]
        delay = backoff_seconds(tries, base=self.retry_base_seconds, cap=30.0)
        log.warning("retry %d/%d of %s from %s in %.1fs: %s", tries, self.max_retries, incoming.message_id, self.queue_name, delay, error)
        await self._republish(incoming, f"{self.queue_name}.retry", headers, expiration=delay)
        await incoming.ack()

    async def _republish(
        self, incoming: AbstractIncomingMessage, queue: str, headers: dict, expiration: float | None = None
    ) -> None:
        await self.broker.publish(
            incoming.body,
            routing_key=queue,
            persist=True,
            timeout=10,
            content_type=incoming.content_type,
            message_type=incoming.type,
            message_id=incoming.message_id,
            correlation_id=incoming.correlation_id,
            reply_to=incoming.reply_to,
            headers=headers,
            expiration=expiration,
        )


async def declare_consumer_queue(
    broker: RabbitBroker,
    topology: Topology,
    queue: str,
    exchange: str,
    routing_keys: list[str],
):
    """Declare ``queue`` (durable) with its ``.retry`` and ``.dlq``, bind it to ``exchange``; return it."""
    ex = await broker.declare_exchange(topic_exchange(exchange))
    main = await broker.declare_queue(durable_queue(queue))
    await broker.declare_queue(
        durable_queue(f"{queue}.retry", {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue})
    )
    await broker.declare_queue(durable_queue(f"{queue}.dlq"))
    for key in routing_keys:
        await main.bind(ex, routing_key=key)
    topology.declared_queues.update({queue, f"{queue}.retry", f"{queue}.dlq"})
    return main
