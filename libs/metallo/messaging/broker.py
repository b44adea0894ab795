"""FastStream's RabbitBroker, configured the way every Metallo component needs it.

One place decides: publisher confirms on, ``mandatory`` publishes whose
Basic.Return is reported as a failure (FastStream hands the returned message
back instead of an ack), quiet logging, a bounded connect timeout.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from aiormq.abc import DeliveredMessage
from faststream.rabbit import Channel, ExchangeType, RabbitBroker, RabbitExchange, RabbitQueue
from pamqp.commands import Basic

log = logging.getLogger(__name__)


def make_broker(amqp_url: str, *, prefetch: int | None = None, connect_timeout: float = 10.0) -> RabbitBroker:
    """A RabbitBroker with confirms; ``prefetch`` bounds unacked deliveries per channel."""
    return RabbitBroker(
        amqp_url,
        default_channel=Channel(publisher_confirms=True, prefetch_count=prefetch),
        timeout=connect_timeout,
        logger=None,
        graceful_timeout=None,
    )


def topic_exchange(name: str) -> RabbitExchange:
    """A durable topic exchange (``metallo.commands``, ``metallo.events``)."""
    return RabbitExchange(name, type=ExchangeType.TOPIC, durable=True)


def durable_queue(name: str, arguments: dict | None = None, routing_key: str = "") -> RabbitQueue:
    """A durable queue, optionally with x-arguments (dead-letter target, …)."""
    return RabbitQueue(name, durable=True, arguments=arguments, routing_key=routing_key)


def was_returned(result: object) -> bool:
    """True when a mandatory publish (FastStream's or aio-pika's) came back as a Basic.Return (unroutable)."""
    return isinstance(result, DeliveredMessage) and isinstance(result.delivery, Basic.Return)


def principal_of(amqp_url: str) -> str:
    """The RabbitMQ user an ``amqp://user:password@host/`` URL connects as (``guest`` when
    the URL names none, as AMQP clients default). Every publish sets it as ``user_id``,
    which RabbitMQ refuses unless it equals the connection's user: owners read it as the
    sender's proven principal (``metallo.messaging.intake``)."""
    user = urlsplit(amqp_url).username
    return unquote(user) if user else "guest"


DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


def amqp_url_from_environment(environ: Mapping[str, str] | None = None,
                              default: str = DEFAULT_AMQP_URL) -> str:
    """The broker URL a service connects with: ``METALLO_AMQP_URL``; when
    ``METALLO_AMQP_PASSWORD_FILE`` names a file, its first line is the password (kept
    out of the environment and command lines) of ``METALLO_AMQP_USER`` (default: the
    URL's user). Raises ValueError when the file cannot be read or is empty, or when
    no user is named."""
    env = os.environ if environ is None else environ
    url = env.get("METALLO_AMQP_URL") or default
    password_file = env.get("METALLO_AMQP_PASSWORD_FILE")
    if not password_file:
        return url
    try:
        password = Path(password_file).read_text(encoding="utf-8").splitlines()[0].strip()
    except (OSError, IndexError, UnicodeDecodeError):
        raise ValueError(f"METALLO_AMQP_PASSWORD_FILE {password_file} cannot be read or is empty") from None
    parts = urlsplit(url)
    user = env.get("METALLO_AMQP_USER") or (unquote(parts.username) if parts.username else "")
    if not user or not password:
        raise ValueError("METALLO_AMQP_PASSWORD_FILE needs a user: set METALLO_AMQP_USER")
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{parts.hostname or '127.0.0.1'}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, parts.fragment))
