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

from faststream import AckPolicy
from faststream.rabbit import RabbitBroker, RabbitMessage, RabbitQueue
from google.protobuf.message import Message

from metallo.common.v1 import common_pb2
from metallo.messaging.broker import make_broker, principal_of, topic_exchange, was_returned
from metallo.messaging.envelope import decode
from metallo.messaging.errors import OutcomeUncertain, PoisonMessage, Rejected
from metallo.messaging.intake import MEMBER_TOKEN_HEADER
from metallo.messaging.registry import message_class
from metallo.messaging.topology import CONTENT_TYPE, Topology, contract_version, request_routing_key

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
        self._broker: RabbitBroker | None = None
        self._reply_queue: str = self.topology.reply_queue(self.client_id)

    async def start(self) -> None:
        """Connect, declare the reply queue and start listening for replies."""
        broker = make_broker(self.amqp_url)
        subscriber = broker.subscriber(
            RabbitQueue(self._reply_queue, exclusive=True, auto_delete=True),
            ack_policy=AckPolicy.ACK_FIRST,
            no_reply=True,
        )
        subscriber(self._on_reply)
        await broker.connect()
        await broker.declare_exchange(topic_exchange(self.topology.commands_exchange))
        await broker.start()
        self._broker = broker

    async def close(self) -> None:
        """Close the connection; pending requests become uncertain."""
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(OutcomeUncertain("client closed before the reply arrived"))
        self._pending.clear()
        if self._broker is not None:
            await self._broker.stop()
            self._broker = None

    async def stop(self) -> None:
        """Same as :meth:`close` (so a client can be managed like the other parts)."""
        await self.close()

    async def __aenter__(self) -> RequestClient:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def request(self, message: Message, *, timeout: float = 10.0,
                      member_token: str | None = None) -> Message:
        """Send ``message`` to its owner and return the typed reply.

        ``member_token``, when given, is the member's access token: it travels in the
        ``authorization`` header (``Bearer <token>``), never in the body, and the owner
        takes the acting member from it (``metallo.messaging.intake``). Every request
        carries this connection's user as ``user_id``.

        Raises :class:`Rejected` (the owner refused, with its code),
        :class:`OutcomeUncertain` (no reply within ``timeout`` seconds) or
        :class:`ServiceUnavailable` (no queue for the owner).
        """
        if self._broker is None:
            raise RuntimeError("RequestClient.start() was not called")
        owner, key = request_routing_key(message)
        headers = {"contract-version": contract_version(message)}
        if member_token:
            headers[MEMBER_TOKEN_HEADER] = f"Bearer {member_token}"
        correlation_id = str(uuid.uuid4())
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        try:
            try:
                result = await self._broker.publish(
                    message.SerializeToString(deterministic=True),
                    exchange=topic_exchange(self.topology.commands_exchange),
                    routing_key=key,
                    mandatory=True,
                    persist=True,
                    timeout=timeout,
                    content_type=CONTENT_TYPE,
                    message_type=message.DESCRIPTOR.full_name,
                    message_id=str(uuid.uuid4()),
                    correlation_id=correlation_id,
                    reply_to=self._reply_queue,
                    headers=headers,
                    user_id=principal_of(self.amqp_url),
                )
            except TimeoutError as exc:
                raise OutcomeUncertain(f"{key}: the broker did not confirm within {timeout}s") from exc
            if was_returned(result):
                raise ServiceUnavailable(f"no queue for {owner} ({key}): is the {owner} service running?")
            try:
                outcome: common_pb2.Outcome = await asyncio.wait_for(future, timeout)
            except TimeoutError as exc:
                idle = await self._owner_has_no_consumer(self.topology.request_queue(message))
                raise OutcomeUncertain(
                    f"{key}: no reply within {timeout}s; the outcome is uncertain "
                    + (
                        f"— no {owner} service is consuming its queue: the request waits there "
                        "and is decided when the service starts "
                        if idle
                        else ""
                    )
                    + "(retrying with the same command_id is safe)"
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

    async def _owner_has_no_consumer(self, queue: str) -> bool:
        """True when the owner's ``queue`` exists with no consumer (its service is down)."""
        try:
            # declare=False is a passive declare; re-declaring refreshes the counts
            # that FastStream's declarer cached with the queue object.
            declared = await self._broker.declare_queue(RabbitQueue(queue, durable=True, declare=False))
            result = await declared.declare(timeout=2)
        except Exception:  # the diagnosis is best effort; the timeout stands either way
            return False
        return result.consumer_count == 0

    async def _on_reply(self, message: RabbitMessage) -> None:
        incoming = message.raw_message
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
