"""Queue consumption with bounded retries and dead-lettering (DESIGN.md, Messaging).

Every consumed queue ``Q`` has two companions:

- ``Q.retry``: a delivery whose handler raised is re-published there with a
  per-message TTL (exponential backoff); RabbitMQ dead-letters it back to ``Q``
  when the TTL ends. The try count travels in header ``x-metallo-retries``.
- ``Q.dlq``: after ``max_retries`` tries, or at once for a poison message
  (unknown type, wrong contract version, undecodable body, inbox hash mismatch),
  the delivery is parked there with header ``x-metallo-dead-reason``.

A delivery is acked only after its effect committed (or after it was parked),
so a crash redelivers it and the inbox absorbs the repeat. Acks are coalesced:
once every delivery up to a tag is settled, one ``Basic.Ack(multiple)`` covers
them all (see :class:`_Acks`). Deliveries of one
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
from aio_pika.exceptions import ChannelInvalidStateError
from faststream.rabbit import RabbitBroker

from metallo.messaging.broker import durable_queue, make_broker, principal_of, topic_exchange
from metallo.messaging.dispatch_rows import backoff_seconds
from metallo.messaging.envelope import Envelope, decode
from metallo.messaging.errors import PoisonMessage
from metallo.messaging.intake import MEMBER_TOKEN_HEADER, SENDER_HEADER
from metallo.messaging.registry import load_all_messages
from metallo.messaging.topology import Topology
from metallo.operations.metrics import DEAD_LETTERED, REDELIVERED, RETRIED

log = logging.getLogger(__name__)

Handler = Callable[[Envelope, AbstractIncomingMessage], Awaitable[None]]
BatchHandler = Callable[[list[Envelope]], Awaitable[None]]


def _delivered_on(incoming: AbstractIncomingMessage, channel: object) -> bool:
    """True when ``incoming`` came on ``channel`` (and that channel is open)."""
    try:
        return incoming.channel is channel
    except ChannelInvalidStateError:  # aio-pika raises for a closed channel
        return False


class _Acks:
    """Acks the settled deliveries of one channel, many per ``Basic.Ack``.

    Lanes settle deliveries out of arrival order. Delivery tags grow in arrival
    order, so once every delivery up to tag ``t`` is settled one ack with
    ``multiple`` covers them all. Settled deliveries behind an older one still
    being handled wait for it, but never more than ``hold`` of them: past that
    they are acked one by one, so a slow handler cannot use up the prefetch
    window. Every ack still comes after the delivery's commit (or parking).

    Acks leave in the order they were decided (a FIFO lock): a multiple ack
    overtaking an earlier one would leave that one naming a tag RabbitMQ no
    longer holds, which closes the channel.
    """

    def __init__(self, channel: object, hold: int):
        self.channel = channel
        self.hold = hold
        self._unsettled: dict[int, None] = {}  # tags in arrival order, i.e. ascending
        self._held: list[AbstractIncomingMessage] = []
        self._sending = asyncio.Lock()

    def received(self, incoming: AbstractIncomingMessage) -> None:
        """Note a delivery handed to a lane."""
        self._unsettled[incoming.delivery_tag] = None

    async def settle(self, messages: list[AbstractIncomingMessage]) -> None:
        """Ack ``messages`` (each committed or parked) as soon as their turn allows."""
        for incoming in messages:
            self._unsettled.pop(incoming.delivery_tag, None)
        self._held.extend(messages)
        oldest = next(iter(self._unsettled), None)  # the oldest delivery still being handled
        if oldest is None:
            ready, self._held = self._held, []
        else:
            ready = [m for m in self._held if m.delivery_tag < oldest]
            self._held = [m for m in self._held if m.delivery_tag > oldest]
        if ready:
            # The newest one's tag is still unacked (RabbitMQ refuses a tag it does
            # not hold); older ones acked one by one before are simply skipped.
            last = max(ready, key=lambda m: m.delivery_tag)
            async with self._sending:
                await last.ack(multiple=True)
        if len(self._held) >= self.hold:
            await self.flush()

    async def flush(self) -> None:
        """Ack every held delivery one by one (a slow handler holds the others back, or stop)."""
        held, self._held = self._held, []
        if held:
            async with self._sending:
                for incoming in held:
                    await incoming.ack()


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

    :meth:`stop` lets each lane finish the batch in hand (up to
    ``stop_grace_seconds``) before the connection closes, so those deliveries
    are acked; deliveries still waiting in a lane are not acked and come back.
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
        stop_grace_seconds: float = 10.0,
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
        self.stop_grace_seconds = stop_grace_seconds
        self._broker: RabbitBroker | None = None
        self._queue = None
        self._consumer_tag: str | None = None
        self._lanes: list[asyncio.Queue] = [asyncio.Queue() for _ in range(lanes)]
        self._workers: list[asyncio.Task] = []
        self._closing = False
        self._acks: _Acks | None = None

    async def start(self) -> None:
        """Connect (FastStream broker), declare the topology and start consuming; acks are manual."""
        # Import every generated message module now, not on the first delivery.
        load_all_messages()
        self._closing = False
        self._lanes = [asyncio.Queue() for _ in self._lanes]
        broker = make_broker(self.amqp_url, prefetch=self.prefetch)
        await broker.connect()
        queue = await declare_consumer_queue(
            broker, self.topology, self.queue_name, self.exchange_name, self.routing_keys
        )
        self._queue, self._broker = queue, broker
        self._workers = [asyncio.create_task(self._lane(q)) for q in self._lanes]
        # Consume on the broker's own channel with aio-pika's callback: it is called
        # in delivery order with no await before the lane hand-off, which keeps an
        # aggregate's deliveries in order (a FastStream subscriber's decode pipeline
        # may reorder concurrent deliveries).
        self._consumer_tag = await queue.consume(self._on_message)

    async def connected(self, timeout: float = 2.0) -> bool:
        """True while this consumer's RabbitMQ connection is up (readiness)."""
        return self._broker is not None and await self._broker.ping(timeout)

    async def attached(self, timeout: float = 2.0) -> bool:
        """True while connected and subscribed to the queue (readiness: a service
        whose consumer is not attached takes no work)."""
        if self._consumer_tag is None or self._closing:
            return False
        return await self.connected(timeout)

    @property
    def broker(self) -> RabbitBroker:
        """The connected broker (for publishing replies beside the consumer)."""
        if self._broker is None:
            raise RuntimeError("consumer not started")
        return self._broker

    async def stop(self) -> None:
        """Stop consuming, let the lanes finish, then close; unacked deliveries come back later.

        Order matters: the lanes ack on the broker's channel, so it closes last.
        """
        self._closing = True
        if self._broker is not None:
            try:
                await self._queue.cancel(self._consumer_tag)
            except Exception:  # the connection may already be gone
                pass
        for lane in self._lanes:
            while not lane.empty():  # never acked: RabbitMQ redelivers them after close
                lane.get_nowait()
            lane.put_nowait(None)  # wakes an idle lane
        if self._workers:
            _done, late = await asyncio.wait(self._workers, timeout=self.stop_grace_seconds)
            for task in late:
                task.cancel()
            await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        if self._acks is not None:
            try:  # settled deliveries held behind one that was not handled
                await self._acks.flush()
            except Exception:  # the channel may already be gone: they come back, the inbox absorbs them
                pass
            self._acks = None
        if self._broker is not None:
            await self._broker.stop()
            self._broker = None

    async def _on_message(self, incoming: AbstractIncomingMessage) -> None:
        # Hand the delivery to its lane (no await before: order kept); acked there after commit.
        if self._closing:
            return  # not acked: redelivered after close
        acks = self._acks
        if acks is None or acks.channel is not incoming.channel:
            # A new channel (first delivery, or after a reconnect) numbers its tags
            # afresh; the old channel's unacked deliveries are redelivered anyway.
            acks = self._acks = _Acks(incoming.channel, hold=max(1, (self.prefetch or 64) // 2))
        acks.received(incoming)
        if incoming.redelivered:
            REDELIVERED.labels(self.queue_name).inc()
        key = str((incoming.headers or {}).get("x-metallo-aggregate") or incoming.message_id or "")
        lane = zlib.crc32(key.encode()) % len(self._lanes)
        self._lanes[lane].put_nowait(incoming)  # unbounded (prefetch bounds it): no await

    async def _lane(self, queue: asyncio.Queue) -> None:
        # ``None`` in the queue means stop (see :meth:`stop`).
        while (first := await queue.get()) is not None:
            batch = [first]
            if self.max_batch > 1:
                # Linger briefly so a trickle of deliveries shares one transaction.
                deadline = asyncio.get_running_loop().time() + self.linger_seconds
                while len(batch) < self.max_batch and not self._closing:
                    if not queue.empty():
                        item = queue.get_nowait()
                    else:
                        try:  # asyncio.timeout_at: no task per wait, unlike wait_for
                            async with asyncio.timeout_at(deadline):
                                item = await queue.get()
                        except TimeoutError:
                            break
                    if item is None:
                        queue.put_nowait(None)  # seen again after this batch
                        break
                    batch.append(item)
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
                await self._settle([incoming for _env, incoming in decoded])
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
        await self._settle([incoming])

    async def _park(self, incoming: AbstractIncomingMessage, reason: str) -> None:
        headers = dict(incoming.headers or {})
        # A parked delivery stays for an operator: a member's bearer token never does.
        headers.pop(MEMBER_TOKEN_HEADER, None)
        headers["x-metallo-dead-reason"] = reason[:500]
        headers["x-metallo-source-queue"] = self.queue_name
        DEAD_LETTERED.labels(self.queue_name).inc()
        await self._republish(incoming, f"{self.queue_name}.dlq", headers)
        await self._settle([incoming])

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
        RETRIED.labels(self.queue_name).inc()
        log.warning("retry %d/%d of %s from %s in %.1fs: %s", tries, self.max_retries, incoming.message_id, self.queue_name, delay, error)
        await self._republish(incoming, f"{self.queue_name}.retry", headers, expiration=delay)
        await self._settle([incoming])

    async def _settle(self, messages: list[AbstractIncomingMessage]) -> None:
        """Ack deliveries whose work is done (committed, parked or re-queued for a retry).

        Deliveries of a channel that has gone since cannot be acked; RabbitMQ
        redelivers them and the inbox absorbs the repeat.
        """
        acks = self._acks
        current = [m for m in messages if acks is not None and _delivered_on(m, acks.channel)]
        if current:
            await acks.settle(current)
        if len(current) < len(messages):
            raise ChannelInvalidStateError(
                f"{len(messages) - len(current)} deliveries came on a channel that has closed since"
            )

    async def _republish(
        self, incoming: AbstractIncomingMessage, queue: str, headers: dict, expiration: float | None = None
    ) -> None:
        principal = principal_of(self.amqp_url)
        if SENDER_HEADER not in headers or incoming.user_id != principal:
            # The re-queued copy carries this owner's user_id; the original sender
            # travels beside it, believed only under that user_id (intake.sender).
            headers[SENDER_HEADER] = incoming.user_id or ""
        await self.broker.publish(
            incoming.body,
            routing_key=queue,
            persist=True,
            timeout=10,
            user_id=principal,
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
