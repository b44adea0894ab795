"""The owner's side of typed commands and queries (DESIGN.md, Messaging).

Commands: one transaction runs the handler, stores the command receipt
(command_id → input fingerprint and outcome) and queues the reply in the outbox;
the delivery is acked after commit and the relay sends the reply. The same
command_id with the same input returns the saved outcome; with a different
input it is an ``idempotency-conflict`` rejection. A handler raising
:class:`Rejected` rolls its writes back; the rejection itself is saved and
replied (a ``transient`` one is replied, not saved). Any other exception is retried, then dead-lettered.

With an :class:`~metallo.audit.AuditTrail`, every decision of an audited command
appends its audit record in the transaction that decides it (docs/operators.md,
Audit): the accepted one with the handler's writes and the receipt, a saved
rejection (and an intake refusal) with its reply. Replays and transient refusals
decide nothing and record nothing.

Queries run read-only and are replied directly (no outbox: they change nothing).
A command's or query's ``before`` step (e.g. a git read) runs outside any transaction.

Before either, :class:`~metallo.messaging.intake.Intake` decides who is asking (a
member token, or a principal allowed to assert the acting member); a refusal
there is replied and never saved, and nothing else runs.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.message import Message
from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from metallo.audit.records import ACCEPTED, REFUSED
from metallo.audit.records import append as append_audit
from metallo.audit.trail import AuditTrail
from metallo.common.v1 import common_pb2
from metallo.messaging.broker import principal_of
from metallo.messaging.consumer import QueueConsumer
from metallo.messaging.envelope import Envelope
from metallo.messaging.errors import PoisonMessage, Rejected
from metallo.messaging.intake import Caller, Intake, sender
from metallo.messaging.outbox import Outbox
from metallo.messaging.registry import full_name
from metallo.messaging.schema import command_receipts
from metallo.messaging.topology import CONTENT_TYPE, Topology, contract_version, request_routing_key
from metallo.operations.metrics import record_request
from metallo.persistence.engine import session_factory
from metallo.persistence.prebuilt import insert_statement

# Built once (ADR 0013): every command's idempotency check runs it.
_SAVED_OUTCOME = select(command_receipts.c.fingerprint, command_receipts.c.outcome).where(
    command_receipts.c.command_id == bindparam("w_command_id")
)
log = logging.getLogger(__name__)
# The Outcome decided for the delivery being handled (read by the request metrics).
_DECIDED: ContextVar[common_pb2.Outcome | None] = ContextVar("decided", default=None)
# Who sent the delivery being handled (its principal, for the audit record).
_SENDER: ContextVar[str | None] = ContextVar("sender", default=None)

Handler = Callable[..., Awaitable[Message]]
Before = Callable[[Message], Awaitable[Any]]


def fingerprint(message: Message) -> str:
    """sha256 of the command's deterministic serialization: its input identity."""
    return hashlib.sha256(message.SerializeToString(deterministic=True)).hexdigest()


def accepted(reply: Message) -> common_pb2.Outcome:
    """Wrap a typed reply in an accepted Outcome."""
    packed = AnyMessage()
    packed.Pack(reply)
    return common_pb2.Outcome(accepted=packed)


def rejected(code: str, message: str = "", details: dict[str, str] | None = None) -> common_pb2.Outcome:
    """A rejected Outcome with a stable ``code``."""
    return common_pb2.Outcome(rejected=common_pb2.Rejection(code=code, message=message, details=details or {}))


class CommandServer:
    """Serves one context's command and query queues (see module doc)."""

    def __init__(
        self,
        context: str,
        engine: AsyncEngine,
        amqp_url: str,
        topology: Topology,
        *,
        prefetch: int = 32,
        intake: Intake | None = None,
        audit: AuditTrail | None = None,
    ):
        """``intake`` decides who may ask (default: :meth:`Intake.from_environment`
        for the principal of ``amqp_url``); ``audit`` names the commands whose
        decisions are recorded in the service's ``audit_records`` (None: none)."""
        self.context = context
        self.intake = intake or Intake.from_environment(principal_of(amqp_url))
        self.engine = engine
        self.sessions = session_factory(engine)
        self.amqp_url = amqp_url
        self.topology = topology
        self.outbox = Outbox(topology)
        self.audit = audit
        self.prefetch = prefetch
        self._commands: dict[str, Handler] = {}
        self._before: dict[str, Before] = {}
        self._queries: dict[str, Handler] = {}
        self._consumers: list[QueueConsumer] = []

    def command(
        self, message_type: type[Message], *, before: Before | None = None
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``handler(session, command) -> reply`` for ``message_type``.

        ``before(command)``, when given, runs *outside* any transaction (for I/O
        such as a git read, DESIGN.md: no external call inside a transaction),
        only for a command_id not decided yet; its result is passed on as
        ``handler(session, command, prepared)``. It may raise :class:`Rejected`.
        """
        if before is not None:
            self._before[full_name(message_type)] = before
        return self._register(self._commands, message_type, "command")

    def query(
        self, message_type: type[Message], *, before: Before | None = None
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``handler(session, query) -> reply`` for ``message_type``.

        ``before(query)``, when given, runs first and *outside* any transaction (for
        I/O such as a git read); its result is passed on as ``handler(session, query,
        prepared)``. Either may raise :class:`Rejected`.
        """
        if before is not None:
            self._before[full_name(message_type)] = before
        return self._register(self._queries, message_type, "query")

    def _register(self, table: dict[str, Handler], message_type: type[Message], kind: str):
        owner, key = request_routing_key(message_type)
        if owner != self.context or f".{kind}." not in key:
            raise ValueError(f"{full_name(message_type)} is not a {kind} of {self.context}")

        def register(handler: Handler) -> Handler:
            table[full_name(message_type)] = handler
            return handler

        return register

    async def start(self) -> None:
        """Declare the queues and start consuming commands and queries."""
        self._consumers = [
            QueueConsumer(
                self.amqp_url,
                self.topology,
                self.topology.command_queue(self.context),
                exchange=self.topology.commands_exchange,
                routing_keys=[f"{self.context}.command.#"],
                handle=self._measured("command", self._handle_command),
                prefetch=self.prefetch,
            ),
            QueueConsumer(
                self.amqp_url,
                self.topology,
                self.topology.query_queue(self.context),
                exchange=self.topology.commands_exchange,
                routing_keys=[f"{self.context}.query.#"],
                handle=self._measured("query", self._handle_query),
                prefetch=self.prefetch,
            ),
        ]
        for consumer in self._consumers:
            await consumer.start()

    @property
    def queue_consumers(self) -> list[QueueConsumer]:
        """The command and query queues' consumers (empty before :meth:`start`)."""
        return list(self._consumers)

    async def stop(self) -> None:
        """Stop consuming; deliveries not yet acked are redelivered to the next server."""
        for consumer in self._consumers:
            await consumer.stop()

    def _measured(self, kind: str, handle):
        """``handle`` counted in ``metallo_requests`` and timed (metallo.operations.metrics)."""
        async def run(envelope: Envelope, incoming) -> None:
            token, start = _DECIDED.set(None), time.perf_counter()
            sent_by = _SENDER.set(None)
            message = full_name(envelope.message)
            try:
                await handle(envelope, incoming)
            except Exception:
                record_request(self.context, kind, message, time.perf_counter() - start, "failed")
                raise
            else:
                outcome = _DECIDED.get()
                refused = outcome is not None and outcome.WhichOneof("result") == "rejected"
                record_request(self.context, kind, message, time.perf_counter() - start,
                               "rejected" if refused else "accepted",
                               outcome.rejected.code if refused else "")
            finally:
                _DECIDED.reset(token)
                _SENDER.reset(sent_by)
        return run

    async def _admitted(self, envelope: Envelope, incoming) -> bool:
        """Run the intake check; reply its refusal (unsaved) and say False when it refuses."""
        _SENDER.set(sender(incoming, self.intake.own_principal))
        try:
            caller: Caller = await self.intake.admit(envelope.message, incoming)
            _SENDER.set(caller.principal)
        except Rejected as exc:
            log.warning("%s refused %s %s from %r: %s", self.context, full_name(envelope.message),
                        envelope.message_id, incoming.user_id, exc.code)
            outcome = rejected(exc.code, exc.message, exc.details)
            if exc.transient:
                outcome.rejected.details["transient"] = "true"
            _DECIDED.set(outcome)
            if self._is_query(envelope):
                await self._reply_query(envelope, outcome)
            else:
                await self._save_and_reply(envelope, None, outcome, audited=not exc.transient)
            return False
        return True

    def _is_query(self, envelope: Envelope) -> bool:
        return full_name(envelope.message) in self._queries

    async def _handle_command(self, envelope: Envelope, incoming) -> None:
        name = full_name(envelope.message)
        handler = self._commands.get(name)
        if handler is None:
            raise PoisonMessage(f"{self.context} does not handle command {name}")
        if not await self._admitted(envelope, incoming):
            return
        command_id = envelope.message.metadata.command_id
        if not command_id:
            await self._save_and_reply(envelope, None, rejected("invalid-argument", "metadata.command_id is required"),
                                       audited=True)
            return
        digest = fingerprint(envelope.message)
        before = self._before.get(name)
        try:
            prepared = None
            if before is not None:
                # A decided command is replayed without repeating the outside work.
                async with self.sessions() as session, session.begin():
                    saved = await self._saved_outcome(session, command_id, digest)
                    if saved is not None:
                        await self._reply(session, envelope, saved)
                        return
                prepared = await before(envelope.message)
            async with self.sessions() as session, session.begin():
                saved = await self._saved_outcome(session, command_id, digest)
                if saved is not None:
                    await self._reply(session, envelope, saved)
                    return
                if before is not None:
                    reply = await handler(session, envelope.message, prepared)
                else:
                    reply = await handler(session, envelope.message)
                outcome = accepted(reply)
                await self._record(session, envelope, ACCEPTED, reply=reply)
                await session.execute(
                    *insert_statement(
                        command_receipts,
                        {
                            "command_id": command_id,
                            "message_type": name,
                            "fingerprint": digest,
                            "outcome": outcome.SerializeToString(deterministic=True),
                        },
                    )
                )
                await self._reply(session, envelope, outcome)
        except Rejected as exc:
            outcome = rejected(exc.code, exc.message, exc.details)
            if exc.transient:
                outcome.rejected.details["transient"] = "true"
            await self._save_and_reply(envelope, None if exc.transient else digest, outcome,
                                       audited=not exc.transient)
        except IntegrityError as exc:
            # A concurrent delivery of the same command_id committed first: retry
            # the delivery, which then finds and replays the saved outcome.
            raise RuntimeError(f"concurrent command {command_id}: {exc.orig}") from exc

    async def _saved_outcome(self, session: AsyncSession, command_id: str, digest: str) -> common_pb2.Outcome | None:
        row = (await session.execute(_SAVED_OUTCOME, {"w_command_id": command_id})).first()
        if row is None:
            return None
        if row.fingerprint != digest:
            return rejected(
                "idempotency-conflict",
                f"command_id {command_id} was already used with a different input",
            )
        outcome = common_pb2.Outcome()
        outcome.ParseFromString(row.outcome)
        return outcome

    async def _save_and_reply(self, envelope: Envelope, digest: str | None, outcome: common_pb2.Outcome,
                              *, audited: bool = False) -> None:
        """Save a rejection for the command_id (unless ``digest`` is None) and queue its reply, in one
        transaction; with ``audited``, also the refusal's audit record (unless the command_id
        was decided already: a replay decides nothing)."""
        command_id = envelope.message.metadata.command_id
        async with self.sessions() as session, session.begin():
            decided = False
            if digest is not None:
                saved = await self._saved_outcome(session, command_id, digest)
                if saved is not None:
                    outcome, decided = saved, True
                else:
                    await session.execute(
                        insert(command_receipts)
                        .values(
                            command_id=command_id,
                            message_type=full_name(envelope.message),
                            fingerprint=digest,
                            outcome=outcome.SerializeToString(deterministic=True),
                        )
                        .on_conflict_do_nothing()
                    )
            if audited and not decided:
                await self._record(session, envelope, REFUSED, code=outcome.rejected.code)
            await self._reply(session, envelope, outcome)

    async def _record(self, session: AsyncSession, envelope: Envelope, decision: str, *,
                      code: str = "", reply: Message | None = None) -> None:
        """Append the audit record of ``decision`` on an audited command, in ``session``'s
        (the deciding) transaction."""
        if self.audit is None or not self.audit.audits(envelope.message):
            return
        await append_audit(session, self.audit.entry(
            envelope.message, principal=_SENDER.get(), correlation_id=envelope.correlation_id,
            decision=decision, code=code, reply=reply))

    async def _reply(self, session: AsyncSession, envelope: Envelope, outcome: common_pb2.Outcome) -> None:
        _DECIDED.set(outcome)
        if envelope.reply_to:
            await self.outbox.send_reply(
                session, outcome, reply_to=envelope.reply_to, correlation_id=envelope.correlation_id
            )

    async def _handle_query(self, envelope: Envelope, incoming) -> None:
        name = full_name(envelope.message)
        handler = self._queries.get(name)
        if handler is None:
            raise PoisonMessage(f"{self.context} does not handle query {name}")
        if not await self._admitted(envelope, incoming):
            return
        before = self._before.get(name)
        try:
            prepared = await before(envelope.message) if before is not None else None
            async with self.sessions() as session, session.begin():
                if before is not None:
                    outcome = accepted(await handler(session, envelope.message, prepared))
                else:
                    outcome = accepted(await handler(session, envelope.message))
        except Rejected as exc:
            outcome = rejected(exc.code, exc.message, exc.details)
        _DECIDED.set(outcome)
        await self._reply_query(envelope, outcome)

    async def _reply_query(self, envelope: Envelope, outcome: common_pb2.Outcome) -> None:
        if envelope.reply_to:
            await self._consumers[1].broker.publish(
                outcome.SerializeToString(deterministic=True),
                routing_key=envelope.reply_to,
                timeout=10,
                content_type=CONTENT_TYPE,
                message_type=full_name(outcome),
                message_id=str(uuid.uuid4()),
                correlation_id=envelope.correlation_id,
                headers={"contract-version": contract_version(outcome)},
                user_id=principal_of(self.amqp_url),
            )
