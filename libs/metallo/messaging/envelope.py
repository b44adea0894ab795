"""The wire envelope: AMQP properties ↔ protobuf (DESIGN.md, Messaging).

Properties: ``type`` = fully-qualified message name, ``message_id`` (UUID),
``correlation_id``, ``content_type`` = ``application/x-protobuf``, header
``contract-version`` (``v1``), optional header ``x-metallo-aggregate``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import aio_pika
from google.protobuf.message import DecodeError, Message

from metallo.messaging.errors import PoisonMessage
from metallo.messaging.registry import message_class
from metallo.messaging.topology import CONTENT_TYPE, contract_version

MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Envelope:
    """A decoded delivery: the message and the properties that matter."""

    message: Message
    message_id: str
    correlation_id: str | None
    reply_to: str | None
    body: bytes


def encode(
    message: Message,
    *,
    message_id: str | None = None,
    correlation_id: str | None = None,
    reply_to: str | None = None,
    aggregate_id: str | None = None,
) -> aio_pika.Message:
    """Build a persistent AMQP message for ``message``."""
    headers = {"contract-version": contract_version(message)}
    if aggregate_id:
        headers["x-metallo-aggregate"] = aggregate_id
    return aio_pika.Message(
        body=message.SerializeToString(deterministic=True),
        content_type=CONTENT_TYPE,
        type=message.DESCRIPTOR.full_name,
        message_id=message_id or str(uuid.uuid4()),
        correlation_id=correlation_id,
        reply_to=reply_to,
        headers=headers,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )


def decode(incoming: aio_pika.abc.AbstractIncomingMessage) -> Envelope:
    """Decode a delivery. Raises :class:`PoisonMessage` with a reason when it cannot be."""
    if incoming.content_type != CONTENT_TYPE:
        raise PoisonMessage(f"content_type {incoming.content_type!r} is not {CONTENT_TYPE}")
    if not incoming.message_id:
        raise PoisonMessage("message_id is missing")
    if len(incoming.body) > MAX_BODY_BYTES:
        raise PoisonMessage(f"body of {len(incoming.body)} bytes exceeds {MAX_BODY_BYTES}")
    name = incoming.type or ""
    cls = message_class(name)
    if cls is None:
        raise PoisonMessage(f"unknown message type {name!r}")
    version = (incoming.headers or {}).get("contract-version")
    if isinstance(version, bytes):
        version = version.decode("utf-8", "replace")
    if version != contract_version(cls):
        raise PoisonMessage(f"contract-version {version!r} is not {contract_version(cls)!r} for {name}")
    msg = cls()
    try:
        msg.ParseFromString(incoming.body)
    except DecodeError as exc:
        raise PoisonMessage(f"body does not decode as {name}: {exc}") from exc
    return Envelope(
        message=msg,
        message_id=incoming.message_id,
        correlation_id=incoming.correlation_id,
        reply_to=incoming.reply_to,
        body=bytes(incoming.body),
    )
