"""Integration-event consumers with inbox receipts (DESIGN.md, Messaging)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

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


class EventConsumer:
    """Consumes events into one transaction each, with an inbox receipt.

    ``name`` is the consumer (its queue is ``<name>.events``). Register handlers
    with :meth:`on` before :meth:`start`. A handler runs inside the transaction
    that also records the receipt; a redelivered message skips the handler.
    """

    def __init__(self, name: str, engine: AsyncEngine, amqp_url: str, topology: Topology, *, prefetch: int = 64):
        self.name = name
        self.engine = engine
        self.sessions = session_factory(engine)
        self.amqp_url = amqp_url
        self.topology = topology
        self.prefetch = prefetch
        self._handlers: dict[str, EventHandler] = {}
        self._routing_keys: list[str] = []
        self._consumer: QueueConsumer | None = None

    def on(self, message_type: type[Message]) -> Callable[[EventHandler], EventHandler]:
        """Decorator: handle events of ``message_type`` with ``handler(session, event)``."""

        def register(handler: EventHandler) -> EventHandler:
            self._handlers[full_name(message_type)] = handler
            self._routing_keys.append(event_routing_key(message_type))
            return handler

        return register

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

    async def stop(self) -> None:
        """Stop consuming; deliveries not yet acked are redelivered later."""
        if self._consumer is not None:
            await self._consumer.stop()

    async def _handle_batch(self, envelopes: list[Envelope]) -> None:
        """Apply several events in one transaction; any surprise → caller retries one by one."""
        handlers = [self._handlers.get(full_name(e.message)) for e in envelopes]
        if None in handlers:
            raise LookupError("batch holds an event without handler")
        async with self.sessions() as session, session.begin():
            new = await record_receipts(session, self.name, [(e.message_id, e.body) for e in envelopes])
            if len(new) != len(envelopes):
                raise LookupError("batch holds redeliveries")  # rolled back; handled one by one
            for envelope, handler in zip(envelopes, handlers, strict=True):
                await handler(session, envelope.message)

    async def _handle(self, envelope: Envelope, _incoming) -> None:
        handler = self._handlers.get(full_name(envelope.message))
        if handler is None:
            raise PoisonMessage(f"{self.name} has no handler for {full_name(envelope.message)}")
        async with self.sessions() as session, session.begin():
            if not await record_receipt(session, self.name, envelope.message_id, envelope.body):
                log.info("%s: duplicate %s ignored", self.name, envelope.message_id)
                return
            await handler(session, envelope.message)
