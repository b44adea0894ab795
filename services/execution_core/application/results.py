"""Apply Site Coordination's recorded results to Site commands (seed 004 §4D).

Runs inside the EventConsumer's transaction with the inbox receipt, so a
redelivered event has no second effect. A result is stored once on its command
(a second, different one is ignored and logged: the first recorded result is
the fact); the Run's version is bumped and its supervisor woken at once.
The supervisor then derives the Run's next state from the recorded facts, so
results arriving late or out of order never move a Run backwards.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.application.ports import RunStore
from metallo.messaging import PoisonMessage
from metallo.site_coordination.v1 import site_coordination_pb2 as sc

if TYPE_CHECKING:
    from execution_core.application.array_groups import ArrayGroups

log = logging.getLogger(__name__)

MAX_RESULT_BYTES = 256 * 1024
#: A start-array result names every task's jobs (up to 1,000 tasks).
MAX_ARRAY_RESULT_BYTES = 2 * 1024 * 1024
MAX_NATIVE_JOBS = 16


def parse_result(event: sc.SiteCommandResultRecorded) -> dict[str, Any]:
    """Validate a result's JSON (docs/site-commands.md) and return it, bounded.

    Raises PoisonMessage for a result that is too large, not JSON, names another
    command, or has an unknown outcome: it can never be applied.
    """
    raw = event.result_json.encode("utf-8")
    limit = MAX_ARRAY_RESULT_BYTES if event.kind == "start-array" else MAX_RESULT_BYTES
    if len(raw) > limit:
        raise PoisonMessage(f"result of {len(raw)} bytes exceeds {limit}")
    try:
        result = json.loads(raw)
    except ValueError as exc:
        raise PoisonMessage(f"result_json is not JSON: {exc}") from exc
    if not isinstance(result, dict):
        raise PoisonMessage("result_json is not an object")
    if result.get("command_id") != event.command_id:
        raise PoisonMessage("result names another command")
    if result.get("outcome") not in ("succeeded", "refused"):
        raise PoisonMessage(f"unknown result outcome {result.get('outcome')!r}")
    jobs = result.get("native_jobs") or []
    if (
        not isinstance(jobs, list)
        or len(jobs) > MAX_NATIVE_JOBS
        or not all(isinstance(j, dict) for j in jobs)
    ):
        raise PoisonMessage("native_jobs is not a short list of objects")
    obs = result.get("observation")
    if obs is not None and not isinstance(obs, dict):
        raise PoisonMessage("observation is not an object")
    return {
        "command_id": event.command_id,
        "outcome": result["outcome"],
        "code": result.get("code"),
        "message": (result.get("message") or "")[:2000] or None,
        "native_jobs": [
            {"stage": str(j.get("stage", ""))[:64], "job_id": str(j.get("job_id", ""))[:128]}
            for j in jobs
        ],
        "observation": obs,
    }


async def apply_result(
    session: AsyncSession,
    event: sc.SiteCommandResultRecorded,
    *,
    store: RunStore,
    groups: ArrayGroups | None = None,
) -> None:
    """Record the result on its command and wake the Run's supervisor (one transaction);
    a group member's prepare and a group's start-array also settle the group's facts."""
    command = await store.find_command(session, event.command_id, for_update=True)
    if command is None:
        log.info("result for unknown command %s ignored (not Execution Core's)", event.command_id)
        return
    result = parse_result(event)
    if command["outcome"] is not None:
        if command["result"] != result:
            log.warning(
                "command %s: a different second result ignored; the first stands", event.command_id
            )
        return
    await store.record_result(
        session,
        event.command_id,
        {
            "outcome": result["outcome"],
            "code": result["code"],
            "result": result,
            "sequence": event.sequence or None,
        },
    )
    if groups is not None:
        # The group row is locked before any Run row (the order every decider keeps).
        if command["kind"] == "start-array":
            await groups.on_start_array_result(session, command, result)
        else:
            await groups.on_prepare_result(session, command, result["outcome"])
    # The command is answered: a deferral reported for it no longer holds the Run.
    await store.clear_waiting(session, command["run_id"], event.command_id)
    # One UPDATE: due now, version bumped (a supervisor deciding meanwhile must
    # re-read), nothing for a terminal Run.
    await store.wake_run(session, command["run_id"])


async def apply_native_end_notice(
    session: AsyncSession, event: sc.SiteNativeEndNoticed, *, store: RunStore
) -> bool:
    """A Site Runtime noticed that an Attempt's native work ended (ADR 0016): note it on
    the Attempt and wake the Run's supervisor, which then sends the next observe at once
    instead of at its back-off time. A hint only: the Run's state changes only from that
    observe's result. Returns False (nothing changed) for an unknown, ended or already
    noticed Attempt."""
    run_id = await store.note_native_end(session, event.attempt_id)
    if run_id is None:
        log.debug("native end notice for attempt %s ignored", event.attempt_id)
        return False
    await store.wake_run(session, run_id)
    return True


_CODE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


async def apply_progress(
    session: AsyncSession, event: sc.SiteProgressReported, *, store: RunStore
) -> bool:
    """The Site deferred a pending command (``SiteProgressReported``, a catalogued code):
    save the code as the Run's ``waiting_reason`` and wake its supervisor, which then
    shows the observation's confidence as it is (a deferred observe: ``uncertain``).
    A command that already has a result, is not Execution Core's, or belongs to an
    Attempt that is no longer current changes nothing (returns False). Raises
    PoisonMessage for a code that is not a catalogue code's shape."""
    if not _CODE.match(event.code):
        raise PoisonMessage(f"deferral code {event.code[:80]!r} is not a code")
    command = await store.find_command(session, event.command_id)
    if command is None or command["outcome"] is not None:
        log.debug("progress for command %s ignored (unknown or answered)", event.command_id)
        return False
    return await store.note_waiting(
        session, command["run_id"], command["attempt_id"], event.command_id, event.code
    )
