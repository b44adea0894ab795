"""The requester's side of typed commands and queries (DESIGN.md, Messaging).

Each client process declares its own exclusive, auto-deleted reply queue
(``metallo.reply.<uuid>``), so any number of client processes run at once.
Requests are matched to replies by ``correlation_id``; many run concurrently
with no global lock. A request is published ``mandatory`` with publisher
confirms: an owner whose queue does not exist is reported at once. A reply
that does not arrive in time raises :class:`OutcomeUncertain` — the command may
have been applied; retrying with the same command_id is safe.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import aio_pika
from aio_pika.exceptions import PublishError
from google.protobuf.message import Message

from metallo.common.v1 import common_pb2
from metallo.messaging.envelope import decode, encode
from metallo.messaging.errors import OutcomeUncertain, PoisonMessage, Rejected
from metallo.messaging.registry import message_class
from metallo.messaging.topology import Topology, request_routing_key

log = logging.getLogger(__name__)


class ServiceUnavailable(Exception):
    """The owner of a command or query has no queue: the service was never started."""


class RequestClient:
    """Sends commands and queries and awaits their typed replies."""

    def __init__(self, amqp_url: str, topology: Topology | None = None):
        self.amqp_url = amqp_url
        self.topology = topology or Topology()
        self.client_id = uuid.uuid4().hex
        self._pending: dict[str, asyncio.Future] = {}
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None
        self._channel: aio_pika.abc.AbstractChannel | None = None
        self._exchange: aio_pika.abc.AbstractExchange | None = None
        self._reply_queue: str = self.topology.reply_queue(self.client_id)

    async def start(self) -> None:
        """Connect, declare the reply queue and start listening for replies."""
        self._connection = await aio_pika.connect_robust(self.amqp_url, timeout=10)
        self._channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        self._exchange = await self._channel.declare_exchange(
            self.topology.commands_exchange, aio_pika.ExchangeType.TOPIC, durable=True
        )
        queue = await self._channel.declare_queue(self._reply_queue, exclusive=True, auto_delete=True)
        await queue.consume(self._on_reply, no_ack=True)

    async def close(self) -> None:
        """Close the connection; pending requests become uncertain."""
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(OutcomeUncertain("client closed before the reply arrived"))
        self._pending.clear()
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def __aenter__(self) -> "RequestClient":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def request(self, message: Message, *, timeout: float = 10.0) -> Message:
        """Send ``message`` to its owner and return the typed reply.

        Raises :class:`Rejected` (the owner refused, with its code),
        :class:`OutcomeUncertain` (no reply within ``timeout`` seconds) or
        :class:`ServiceUnavailable` (no queue for the owner).
        """
        if self._exchange is None:
            raise RuntimeError("RequestClient.start() was not called")
        owner, key = request_routing_key(message)
        correlation_id = str(uuid.uuid4())
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        try:
            try:
                await self._exchange.publish(
                    encode(message, correlation_id=correlation_id, reply_to=self._reply_queue),
                    routing_key=key,
                    mandatory=True,
                    timeout=timeout,
                )
            except PublishError as exc:
                raise ServiceUnavailable(
                    f"no queue for {owner} ({key}): is the {owner} service running?"
                ) from exc
            except asyncio.TimeoutError as exc:
                raise OutcomeUncertain(f"{key}: the broker did not confirm within {timeout}s") from exc
            try:
                outcome: common_pb2.Outcome = await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError as exc:
                raise OutcomeUncertain(
                    f"{key}: no reply within {timeout}s; the outcome is uncertain "
                    "(retrying with the same command_id is safe)"
                ) from exc
        finally:
            self._pending.pop(correlation_id, None)
        if outcome.WhichOneof("result") == "rejected":
            r = outcome.rejected
            raise Rejected(r.code, r.message, dict(r.details))
        type_name = outcome.accepted.TypeName()
        cls = message_class(type_name)
        if cls is None:
            raise PoisonMessage(f"reply of unknown type {type_name!r}")
        reply = cls()
        outcome.accepted.Unpack(reply)
        return reply

    async def _on_reply(self, incoming: aio_pika.abc.AbstractIncomingMessage) -> None:
        future = self._pending.get(incoming.correlation_id or "")
        if future is None or future.done():
            log.debug("reply %s matches no pending request", incoming.correlation_id)
            return
        try:
            envelope = decode(incoming)
        except PoisonMessage as exc:
            future.set_exception(exc)
            return
        if not isinstance(envelope.message, common_pb2.Outcome):
            future.set_exception(PoisonMessage(f"reply is {incoming.type}, not an Outcome"))
            return
        future.set_result(envelope.message)
