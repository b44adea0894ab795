"""Support for the ``metallo`` CLI tests: run the CLI in a worker thread, and a
stand-in for the platform's services on the real broker.

The stand-in answers typed requests on the owners' real queues in a test
namespace with replies the test scripts (a function per message name). It
replaces the *other* services only; the CLI, its RequestClient and RabbitMQ are
the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

import aio_pika
import pytest
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.message import Message

from metallo.common.v1 import common_pb2
from metallo.messaging import Rejected, Topology
from metallo.messaging.envelope import decode, encode
from tests.bus import BUS


@dataclass
class CliResult:
    """Exit code and captured output of one ``metallo`` invocation."""

    code: int
    stdout: str
    stderr: str


def _invoke(args: list[str]) -> CliResult:
    from metallo.cli.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return CliResult(code, out.getvalue(), err.getvalue())


async def cli(*args: str) -> CliResult:
    """Run ``metallo ARGS`` in a thread (it runs its own event loop) and capture it."""
    return await asyncio.to_thread(_invoke, list(args))


def run_cli(*args: str) -> CliResult:
    """Run ``metallo ARGS`` synchronously (for tests with no broker side)."""
    return _invoke(list(args))


Handler = Callable[[Message], Message]


@dataclass
class StandIn:
    """Answers requests for ``owners`` in ``topology``; records every request received.

    ``handlers`` maps a message name (``GetRun``) to a function returning the reply
    or raising :class:`Rejected`. A name mapped to ``None`` is received and never
    answered (an owner that does not reply in time).
    """

    amqp_url: str
    topology: Topology
    owners: tuple[str, ...]
    handlers: dict[str, Handler | None] = field(default_factory=dict)
    received: list[Message] = field(default_factory=list)

    async def __aenter__(self) -> Self:
        self._connection = await aio_pika.connect(self.amqp_url)
        channel = await self._connection.channel()
        self._channel = channel
        exchange = await channel.declare_exchange(self.topology.commands_exchange,
                                                  aio_pika.ExchangeType.TOPIC, durable=True)
        self._queues = []
        for owner in self.owners:
            for kind, name in (("command", self.topology.command_queue(owner)),
                               ("query", self.topology.query_queue(owner))):
                queue = await channel.declare_queue(name, auto_delete=True)
                await queue.bind(exchange, routing_key=f"{owner}.{kind}.*")
                await queue.consume(self._on_request)
                self._queues.append(queue)
        return self

    async def __aexit__(self, *exc) -> None:
        await self._connection.close()
        async with await aio_pika.connect(self.amqp_url) as conn:
            channel = await conn.channel()
            await channel.exchange_delete(self.topology.commands_exchange)

    async def _on_request(self, incoming: aio_pika.abc.AbstractIncomingMessage) -> None:
        async with incoming.process():
            envelope = decode(incoming)
            message = envelope.message
            self.received.append(message)
            name = message.DESCRIPTOR.name
            handler = self.handlers.get(name)
            if handler is None:
                return
            try:
                reply = handler(message)
                packed = AnyMessage()
                packed.Pack(reply)
                outcome = common_pb2.Outcome(accepted=packed)
            except Rejected as exc:
                outcome = common_pb2.Outcome(rejected=common_pb2.Rejection(
                    code=exc.code, message=exc.message, details=exc.details))
            await self._channel.default_exchange.publish(
                encode(outcome, correlation_id=incoming.correlation_id),
                routing_key=incoming.reply_to)

    def names(self) -> list[str]:
        """Message names received, in order."""
        return [m.DESCRIPTOR.name for m in self.received]


STAND_IN_TOKEN = "stand-in.member.token"


def log_in(path, token: str = STAND_IN_TOKEN, expires_in: float = 3600.0) -> None:
    """Store a login at ``path`` as ``metallo login`` would (the stand-in checks no token)."""
    import time

    from metallo.cli.credentials import Credentials, save

    save(Credentials(issuer="https://issuer.test", token_endpoint="https://issuer.test/token",
                     client_id="metallo-cli", username="m-alice", access_token=token,
                     expires_at=time.time() + expires_in), path)


@pytest.fixture(autouse=True)
def cli_environment(monkeypatch, namespace, tmp_path):
    """Member, Project, a stored login and broker namespace for every CLI call; no
    config file (autouse in the test modules that import it)."""
    monkeypatch.setenv("METALLO_CREDENTIALS_FILE", str(tmp_path / "credentials.json"))
    log_in(tmp_path / "credentials.json")
    monkeypatch.setenv("METALLO_MEMBER", "m-alice")
    monkeypatch.setenv("METALLO_PROJECT", "demo")
    monkeypatch.setenv("METALLO_AMQP_URL", BUS.url("cli"))
    monkeypatch.setenv("METALLO_TOPOLOGY_PREFIX", namespace)
    monkeypatch.setenv("METALLO_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("METALLO_CLI_TIMEOUT", "5")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr("metallo.cli.progress.POLL_SECONDS", 0.05)

