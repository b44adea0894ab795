"""One broker session per CLI invocation: typed requests with every failure
turned into a :class:`~metallo.cli.exits.CliError` that says what to do next.

Speaks exactly the Go API's contract (DESIGN.md, Messaging): protobuf commands
and queries to the owner's queues through :class:`~metallo.messaging.RequestClient`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Self, TypeVar

import aio_pika
from aio_pika.exceptions import ChannelClosed
from aiormq.exceptions import (
    AMQPError,
    AuthenticationError,
    ChannelAccessRefused,
    ProbableAuthenticationError,
)
from google.protobuf.message import Message

from metallo.cli.credentials import current_token
from metallo.cli.exits import CliError, Exit, no_answer_hint, rejection_exit, rejection_hint
from metallo.cli.settings import Actor, Connection, redacted_url
from metallo.common.v1 import common_pb2
from metallo.messaging import (
    OutcomeUncertain,
    Rejected,
    RequestClient,
    ServiceUnavailable,
    Topology,
)
from metallo.messaging.topology import request_routing_key

T = TypeVar("T")


def command_metadata(who: Actor, command_id: str | None = None) -> common_pb2.CommandMetadata:
    """CommandMetadata for ``who``; a fresh UUID unless ``command_id`` is given (a retry)."""
    return common_pb2.CommandMetadata(command_id=command_id or str(uuid.uuid4()),
                                      acting_member=who.member, project=who.project)


def query_metadata(who: Actor) -> common_pb2.QueryMetadata:
    """QueryMetadata for ``who``."""
    return common_pb2.QueryMetadata(acting_member=who.member, project=who.project)


def derived_command_id(command_id: str, step: str) -> str:
    """A stable command id for ``step`` of a multi-command operation, so a retry with
    the same ``--command-id`` replays every step (UUID v5 in the given id's space)."""
    try:
        base = uuid.UUID(command_id)
    except ValueError:
        raise CliError(f"--command-id {command_id!r} is not a UUID",
                       "pass the UUID printed by the earlier attempt, or leave it out",
                       Exit.USAGE) from None
    return str(uuid.uuid5(base, step))


class Platform:
    """``async with Platform(conn) as p: reply = await p.request(msg)``."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.topology = Topology(prefix=conn.topology_prefix)
        self._client = RequestClient(conn.amqp_url, self.topology)
        self._probe: aio_pika.abc.AbstractConnection | None = None
        self._serving: set[str] = set()  # owner queues seen with a consumer

    async def __aenter__(self) -> Self:
        try:
            await self._client.start()
        except (ProbableAuthenticationError, AuthenticationError, ChannelAccessRefused):
            raise CliError(
                f"RabbitMQ at {redacted_url(self.conn.amqp_url)} refused the CLI's user (wrong "
                "password, or no permission on this virtual host and topology prefix)",
                "use the CLI's own login (`metallo dev up` writes it; METALLO_AMQP_CREDENTIALS_FILE "
                "names another) and the stack's METALLO_TOPOLOGY_PREFIX", Exit.USAGE,
                code="broker-refused") from None
        except (TimeoutError, OSError, AMQPError) as exc:
            raise CliError(
                f"cannot reach RabbitMQ at {redacted_url(self.conn.amqp_url)}: "
                f"{type(exc).__name__}",
                "start RabbitMQ (`scripts/test` and `scripts/demo` start it when missing; the "
                "dev stack does not) or point METALLO_AMQP_URL at yours", Exit.UNCERTAIN,
                code="broker-unreachable") from None
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._client.close()
        if self._probe is not None:
            await self._probe.close()

    async def _require_consumer(self, message: Message) -> None:
        """Refuse to send when the owner's queue is missing or has no consumer.

        A durable queue keeps a command while its service is down and the service
        decides it when it starts — perhaps much later, to the member's surprise. An
        interactive client must not leave that behind: it checks first (passive
        declare on its own channel: a missing queue closes only that channel) and
        sends nothing. Raises CliError exit 4, code ``service-not-running``.
        """
        owner, _key = request_routing_key(message)
        queue = self.topology.request_queue(message)
        if queue in self._serving:
            return
        consumers = 0
        try:
            if self._probe is None:
                self._probe = await aio_pika.connect(self.conn.amqp_url, timeout=5)
            channel = await self._probe.channel()
            try:
                declared = await channel.declare_queue(queue, passive=True)
                consumers = declared.declaration_result.consumer_count
            finally:
                if not channel.is_closed:
                    await channel.close()
        except ChannelClosed:
            consumers = 0  # no such queue: the service never started here
        except (TimeoutError, OSError, AMQPError):
            return  # the probe is a courtesy; the request itself reports what happens
        if consumers == 0:
            raise CliError(
                f"the {owner} service is not running (no consumer on its queue {queue}); "
                "nothing was sent",
                "start the platform (`metallo dev up`; `metallo dev status` shows what runs) "
                "and run this again", Exit.UNCERTAIN, code="service-not-running")
        self._serving.add(queue)

    async def request(self, message: Message, *, timeout: float | None = None) -> Message:
        """Send a command or query and return the typed reply.

        The member's token (``metallo login``) travels in the request's header;
        without a valid one nothing is sent (exit 2, ``login-required``).

        Raises CliError: a rejection (exit 2, or 3 for not-found codes), no reply in
        time (exit 4, with the command id to retry safely) or an owner that is not
        running (exit 4; checked before sending, so nothing waits in its queue).
        """
        token = current_token()  # before anything is sent: no token, nothing sent
        await self._require_consumer(message)
        try:
            return await self._client.request(message, timeout=timeout or self.conn.timeout_seconds,
                                              member_token=token)
        except Rejected as exc:
            # Details the message already spells out (e.g. each actions.yaml problem) once.
            details = "".join(f"\n  {k}: {v}" for k, v in sorted(exc.details.items())
                              if str(v) not in (exc.message or ""))
            raise CliError(f"{exc.code}: {exc.message or 'refused'}{details}",
                           rejection_hint(exc.code, getattr(message, "repository_url", "")),
                           rejection_exit(exc.code),
                           code=exc.code) from None
        except OutcomeUncertain:
            raise _no_answer(message, timeout or self.conn.timeout_seconds) from None
        except ServiceUnavailable as exc:
            raise CliError(str(exc), "start the platform (`metallo dev up`) and run this again; "
                           "nothing was sent", Exit.UNCERTAIN, code="service-unavailable") from None


def _no_answer(message: Message, seconds: float) -> CliError:
    """The exit-4 error for a request with no reply in ``seconds``: most often its owner
    is not running (the dev stack stopped). A command's hint gives its id to retry
    safely; a query's says to check the service, then read again."""
    owner, _key = request_routing_key(message)
    name = message.DESCRIPTOR.name
    cid = _command_id(message)
    if cid:
        return CliError(
            f"{name}: no answer from {owner} within {seconds:g} s; the outcome is uncertain",
            no_answer_hint(f"run the same command again with --command-id {cid} (safe: the "
                           "platform returns the saved outcome)"),
            Exit.UNCERTAIN, code="outcome-uncertain")
    return CliError(f"{name}: no answer from {owner} within {seconds:g} s",
                    no_answer_hint("run the same read again"), Exit.UNCERTAIN,
                    code="outcome-uncertain")


def _command_id(message: Message) -> str:
    meta = getattr(message, "metadata", None)
    return getattr(meta, "command_id", "") if meta is not None else ""


async def with_platform(conn: Connection, body: Callable[[Platform], Awaitable[T]]) -> T:
    """Open a Platform session, run ``body`` with it, close it."""
    async with Platform(conn) as platform:
        return await body(platform)
