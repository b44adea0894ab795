"""Ordered commands and recorded results (seed 004 §4A; docs/site-commands.md), and
the native end notice (ADR 0016; docs/site-edge.md).

Use cases run inside one transaction given as a :class:`SiteStore` and an
:class:`EventPublisher` bound to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from metallo.site_coordination.v1 import site_coordination_pb2 as sc_pb2
from site_coordination.application.ports import EventPublisher, SiteStore
from site_coordination.domain.canonical import canonical_json, sha256_hex
from site_coordination.domain.deferrals import DeferralCatalogue
from site_coordination.domain.errors import Conflict, Invalid, NotFound
from site_coordination.domain.grants import (
    CommandGrant,
    check_grant,
    check_scope,
    parse_bearer,
    secret_hash,
)
from site_coordination.domain.streams import (
    MAX_PAYLOAD_BYTES,
    START_ARRAY,
    NewCommand,
    StoredCommand,
    StreamKey,
    array_task_attempts,
    check_identifier,
    decide_result,
    validate_new_command,
)


class PredecessorNotAppended(Exception):
    """The command's ``after_command_id`` is not in its stream yet: the append changes
    nothing and is retried (the consumer's backoff, then its dead-letter queue), never
    refused, so the Attempt's commands enter the stream in their owner's order."""


def _aggregate(stream: StreamKey) -> str:
    # One aggregate per stream keeps the stream's events in order through the relay.
    return f"site-stream:{stream.site_id}:{stream.environment}"


async def append_command(store: SiteStore, command: sc_pb2.AppendSiteCommand) -> StoredCommand:
    """Append ``command`` to its stream with the next sequence (no event: ADR 0014).

    Idempotent by ``metadata.command_id``: the same input returns the stored
    command; a different input raises :class:`Conflict` ``idempotency-conflict``.
    Raises :class:`Invalid` ``invalid-argument`` for bad values (seed 004 §4A) and
    ``predecessor-mismatch`` when ``after_command_id`` names a command of another
    Attempt or stream, and :class:`PredecessorNotAppended` while it names none yet.
    """
    command_id = command.metadata.command_id
    if len(command.payload_json.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise Invalid("invalid-argument", f"payload_json exceeds {MAX_PAYLOAD_BYTES} bytes")
    try:
        payload = json.loads(command.payload_json or "{}")
    except ValueError as exc:
        raise Invalid("invalid-argument", "payload_json is not JSON") from exc
    validate_new_command(command_id, command.site_id, command.environment, command.kind,
                         command.run_id, command.attempt_id, command.attempt_number, payload)
    new = NewCommand(
        command_id=command_id,
        stream=StreamKey(command.site_id, command.environment),
        kind=command.kind,
        run_id=command.run_id,
        attempt_id=command.attempt_id,
        attempt_number=command.attempt_number,
        payload_json=canonical_json(payload),
    )
    request_hash = sha256_hex(canonical_json({
        "site_id": new.stream.site_id, "environment": new.stream.environment,
        "kind": new.kind, "run_id": new.run_id, "attempt_id": new.attempt_id,
        "attempt_number": new.attempt_number, "payload": payload,
    }))
    existing = await store.get_command(command_id)
    if existing is not None:
        if existing.request_hash != request_hash:
            raise Conflict("idempotency-conflict",
                           f"command {command_id} was appended with a different input")
        return existing
    if command.after_command_id:
        before = await store.get_command(command.after_command_id)
        if before is None:
            raise PredecessorNotAppended(
                f"command {command_id} waits for {command.after_command_id} in its stream")
        if before.stream != new.stream or before.attempt_id != new.attempt_id:
            raise Invalid("predecessor-mismatch",
                          f"{command.after_command_id} is not a command of attempt "
                          f"{new.attempt_id} in stream {new.stream.site_id}/{new.stream.environment}")
    stored = await store.append_command(new, request_hash)
    if new.kind == START_ARRAY:
        # Each task's Attempt is submitted by this command (its stage-out may then
        # cross the deadline as a started Attempt's does).
        await store.add_array_tasks(command_id, array_task_attempts(payload, new.run_id, new.attempt_id))
    await store.notify(stored.stream)
    # No SiteCommandAppended (ADR 0014): its one consumer never used the sequence,
    # which SiteCommandResultRecorded carries; the AppendSiteCommand reply has it too.
    return stored


async def pull_next(store: SiteStore, stream: StreamKey) -> StoredCommand | None:
    """Hand out the command after the last recorded result (the same one again until
    its result is recorded) and mark it delivered; None when the stream has none.
    """
    return await store.deliver_next(stream)


async def pull_next_for(store: SiteStore, authorization: str | None,
                        ) -> tuple[CommandGrant, StoredCommand | None]:
    """:func:`pull_next` for the stream of the grant in ``authorization`` (an
    ``Authorization`` header value), the grant read afresh in the same statement that
    delivers (seed 004 §4B); nothing is delivered for an unusable grant. Returns the
    grant and the command (None when the stream has none).

    Raises :class:`Unauthenticated` ``credential-*`` as ``grants.authenticate``.
    """
    grant, now, command = await store.grant_and_deliver_next(
        secret_hash(parse_bearer(authorization)))
    return check_grant(grant, now), command


async def _command_in_stream(store: SiteStore, grant: CommandGrant, sequence: int,
                             command_id: str) -> StoredCommand:
    command = await store.get_command(command_id)
    if command is None:
        raise NotFound("command-not-found", "no command has this command_id")
    check_scope(grant, command.stream)
    if command.sequence != sequence:
        raise Invalid("sequence-mismatch",
                      f"command {command_id} has sequence {command.sequence}, not {sequence}")
    return command


async def record_result(store: SiteStore, events: EventPublisher, grant: CommandGrant,
                        sequence: int, result: dict[str, Any]) -> bool:
    """Record the result of command ``sequence`` of the grant's stream exactly once.

    Returns True when recorded now, False when the identical result was already
    recorded. Raises :class:`NotFound` ``command-not-found``, :class:`Forbidden`
    (another stream), :class:`Invalid` ``sequence-mismatch``, :class:`Conflict`
    ``result-conflict`` / ``command-not-delivered`` (seed 004 §4A).
    """
    # The stream row is locked first: concurrent reports are decided one at a time,
    # so only one result can ever win.
    found = await store.command_for_result(str(result["command_id"]))
    recorded, _ = await _record(store, events, grant, found, sequence, result, False)
    return recorded


@dataclass(frozen=True)
class ResultAnswer:
    """What :func:`record_result_for` decided: ``recorded`` (False: the identical result
    was already recorded), the caller's ``grant``, and — when asked for — the ``next``
    command of the stream, delivered in the same transaction (None when there is none)."""

    recorded: bool
    grant: CommandGrant
    next: StoredCommand | None = None
    command: StoredCommand | None = None  # the command whose result it is


async def record_result_for(store: SiteStore, events: EventPublisher, authorization: str | None,
                            sequence: int, result: dict[str, Any], *,
                            deliver_next: bool = False) -> ResultAnswer:
    """:func:`record_result` for the grant in ``authorization``, read afresh in the same
    statement that finds the command and locks its stream (seed 004 §4A–4B). With
    ``deliver_next`` the command after the acknowledged one is also handed out (marked
    delivered, as :func:`pull_next`) in this same transaction, so a Runtime needs no
    second request for it.

    Raises :class:`Unauthenticated` ``credential-*`` first, then as :func:`record_result`;
    on a refusal nothing is recorded and nothing is delivered.
    """
    grant, now, found = await store.grant_and_command_for_result(
        secret_hash(parse_bearer(authorization)), str(result["command_id"]))
    grant = check_grant(grant, now)
    recorded, handed = await _record(store, events, grant, found, sequence, result, deliver_next)
    if deliver_next and not recorded:
        handed = await store.deliver_next(grant.stream)  # a replay: hand out the current next
    return ResultAnswer(recorded=recorded, grant=grant, next=handed,
                        command=found[0] if found is not None else None)


async def _record(store: SiteStore, events: EventPublisher, grant: CommandGrant,
                  found: tuple[StoredCommand, int] | None, sequence: int,
                  result: dict[str, Any], deliver_next: bool,
                  ) -> tuple[bool, StoredCommand | None]:
    if found is None:
        raise NotFound("command-not-found", "no command has this command_id")
    command, acknowledged = found
    check_scope(grant, command.stream)
    if command.sequence != sequence:
        raise Invalid("sequence-mismatch",
                      f"command {command.command_id} has sequence {command.sequence}, not {sequence}")
    result_json = canonical_json(result)
    if not decide_result(command, acknowledged, result_json):
        return False, None
    handed = await store.save_result(command, result_json, deliver_next=deliver_next)
    await events.publish(
        sc_pb2.SiteCommandResultRecorded(
            command_id=command.command_id, site_id=command.stream.site_id,
            environment=command.stream.environment, sequence=command.sequence,
            kind=command.kind, run_id=command.run_id, attempt_id=command.attempt_id,
            result_json=result_json,
        ),
        aggregate_id=_aggregate(command.stream),
    )
    return True, handed


async def report_progress(store: SiteStore, events: EventPublisher, grant: CommandGrant,
                          catalogue: DeferralCatalogue, sequence: int, command_id: str,
                          code: str) -> bool:
    """Record a catalogued deferral of a pending command once per command and code
    (seed 001); publish ``SiteProgressReported`` the first time. Returns True when new.

    Raises :class:`Invalid` ``unknown-deferral-code``, :class:`Conflict`
    ``command-not-delivered`` / ``command-already-resulted``.
    """
    catalogue.check(code)
    command = await _command_in_stream(store, grant, sequence, command_id)
    if command.result_json is not None:
        raise Conflict("command-already-resulted", "the command already has a recorded result")
    if not command.delivered:
        raise Conflict("command-not-delivered", "the command has not been delivered yet")
    if not await store.add_progress(command_id, code):
        return False
    await events.publish(
        sc_pb2.SiteProgressReported(
            command_id=command.command_id, site_id=command.stream.site_id,
            sequence=command.sequence, code=code, run_id=command.run_id,
            attempt_id=command.attempt_id,
        ),
        aggregate_id=_aggregate(command.stream),
    )
    return True


async def notice_native_end(store: SiteStore, events: EventPublisher, grant: CommandGrant,
                            attempt_id: str) -> bool:
    """Record that the Runtime saw the native work of Attempt ``attempt_id`` end, once
    per Attempt, and publish ``SiteNativeEndNoticed {site_id, environment, run_id,
    attempt_id}`` the first time, in this transaction (ADR 0016). Returns True when new,
    False on a repeat (nothing published).

    A hint, never evidence: Execution Core makes the Attempt's next ``observe`` due at
    once; no state of the Run or of any command changes here. ``site_id`` and
    ``environment`` are the grant's stream; ``run_id`` is that of the stream's command
    for the Attempt.

    Raises :class:`Invalid` ``invalid-argument`` for an unsafe ``attempt_id`` and
    :class:`NotFound` ``attempt-not-in-stream`` when no command of the grant's stream
    names the Attempt (an Attempt of another stream included: nothing is revealed).
    """
    check_identifier("attempt_id", attempt_id)
    stream = grant.stream
    run_id = await store.attempt_run_in_stream(stream, attempt_id)
    if run_id is None:
        raise NotFound("attempt-not-in-stream",
                       "no command of the grant's stream names this attempt_id")
    if not await store.add_native_end_notice(stream, run_id, attempt_id):
        return False
    await events.publish(
        sc_pb2.SiteNativeEndNoticed(
            site_id=stream.site_id, environment=stream.environment, run_id=run_id,
            attempt_id=attempt_id,
        ),
        aggregate_id=_aggregate(stream),
    )
    return True
