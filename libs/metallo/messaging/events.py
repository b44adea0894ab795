"""Integration-event consumers with inbox receipts (DESIGN.md, Messaging)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from itertools import groupby

from google.protobuf.message import Message
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from metallo.messaging.consumer import QueueConsumer
from metallo.messaging.envelope import Envelope
from metallo.messaging.errors import PoisonMessage
from metallo.messaging.inbox import record_receipt, record_receipts
from metallo.messaging.registry import full_name
from metallo.messaging.topology import Topology, event_routing_key
from metallo.persistence.engine import session_factory

log = logging.getLogger(__name__)

EventHandler = Callable[[AsyncSession, Message], Awaitable[None]]
BatchEventHandler = Callable[[AsyncSession, list[Message]], Awaitable[None]]


class EventConsumer:
    """Consumes events into one transaction each, with an inbox receipt.

    ``name`` is the consumer (its queue is ``<name>.events``). Register handlers
    with :meth:`on` (one event per call) or :meth:`on_batch` (a list per call)
    before :meth:`start`. A handler runs inside the transaction that also records
    the receipts; a redelivered message skips the handler.
    """

    def __init__(self, name: str, engine: AsyncEngine, amqp_url: str, topology: Topology, *, prefetch: int = 64):
        self.name = name
        self.engine = engine
        self.sessions = session_factory(engine)
        self.amqp_url = amqp_url
        self.topology = topology
        self.prefetch = prefetch
        self._handlers: dict[str, EventHandler] = {}
        self._batch_handlers: dict[str, BatchEventHandler] = {}
        self._routing_keys: list[str] = []
        self._retired: set[str] = set()  # full names of retired event types
        self._consumer: QueueConsumer | None = None

    def on(self, message_type: type[Message]) -> Callable[[EventHandler], EventHandler]:
        """Decorator: handle events of ``message_type`` with ``handler(session, event)``."""

        def register(handler: EventHandler) -> EventHandler:
            self._register(message_type)
            self._handlers[full_name(message_type)] = handler
            return handler

        return register

    def on_batch(self, message_type: type[Message]) -> Callable[[BatchEventHandler], BatchEventHandler]:
        """Decorator: handle events of ``message_type`` with ``handler(session, events)``.

        ``events`` holds one or more events of that type in arrival order (so each
        aggregate's order is kept), all new to this consumer, applied in the one
        transaction that records their receipts — for projections that can write a
        run of events with one statement. Raises ValueError when ``message_type``
        already has a handler.
        """

        def register(handler: BatchEventHandler) -> BatchEventHandler:
            self._register(message_type)
            self._batch_handlers[full_name(message_type)] = handler
            return handler

        return register

    def retire(self, message_type: type[Message]) -> None:
        """Stop handling ``message_type`` (e.g. ``SiteCommandAppended``, ADR 0014): its
        routing key stays bound, so a message an older publisher still sends stays
        routable — an unroutable event would hold up its whole aggregate in that
        publisher's outbox — and each one is acked without effect instead of being
        parked as poison. Raises ValueError when ``message_type`` has a handler."""
        name = full_name(message_type)
        if name in self._handlers or name in self._batch_handlers:
            raise ValueError(f"{self.name} has a handler for {name}; it cannot be retired")
        if name not in self._retired:
            self._retired.add(name)
            self._routing_keys.append(event_routing_key(message_type))

    def _register(self, message_type: type[Message]) -> None:
        name = full_name(message_type)
        if name in self._handlers or name in self._batch_handlers:
            raise ValueError(f"{self.name} already has a handler for {name}")
        if name in self._retired:
            raise ValueError(f"{self.name} retired {name}; it cannot also handle it")
        self._routing_keys.append(event_routing_key(message_type))

    async def start(self) -> None:
        """Declare the queue, bind the registered routing keys and consume."""
        self._consumer = QueueConsumer(
            self.amqp_url,
            self.topology,
            self.topology.event_queue(self.name),
            exchange=self.topology.events_exchange,
            routing_keys=self._routing_keys,
            handle=self._handle,
            handle_batch=self._handle_batch,
            prefetch=self.prefetch,
        )
        await self._consumer.start()

    @property
    def queue_consumers(self) -> list[QueueConsumer]:
        """The event queue's consumer (empty before :meth:`start`)."""
        return [self._consumer] if self._consumer is not None else []

    async def stop(self) -> None:
        """Stop consuming; deliveries not yet acked are redelivered later."""
        if self._consumer is not None:
            await self._consumer.stop()

    async def _handle_batch(self, envelopes: list[Envelope]) -> None:
        """Apply several events in one transaction; any surprise → caller retries one by one."""
        names = [full_name(e.message) for e in envelopes]
        if any(n not in self._handlers and n not in self._batch_handlers for n in names):
            raise LookupError("batch holds an event without handler")
        async with self.sessions() as session, session.begin():
            new = await record_receipts(session, self.name, [(e.message_id, e.body) for e in envelopes])
            if len(new) != len(envelopes):
                raise LookupError("batch holds redeliveries")  # rolled back; handled one by one
            # Runs of one type in arrival order: a batch handler takes each run whole.
            for name, run in groupby(envelopes, key=lambda e: full_name(e.message)):
                events = [e.message for e in run]
                if name in self._batch_handlers:
                    await self._batch_handlers[name](session, events)
                else:
                    for event in events:
                        await self._handlers[name](session, event)

    async def _handle(self, envelope: Envelope, _incoming) -> None:
        name = full_name(envelope.message)
        handler = self._handlers.get(name)
        batch_handler = self._batch_handlers.get(name)
        if handler is None and batch_handler is None:
            if name in self._retired:
                log.debug("%s: retired %s dropped", self.name, name)
                return
            raise PoisonMessage(f"{self.name} has no handler for {name}")
        async with self.sessions() as session, session.begin():
            if not await record_receipt(session, self.name, envelope.message_id, envelope.body):
                log.info("%s: duplicate %s ignored", self.name, envelope.message_id)
                return
            if handler is not None:
                await handler(session, envelope.message)
            else:
                await batch_handler(session, [envelope.message])
