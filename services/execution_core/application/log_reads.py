"""ReadRunLog, GetRunLogRead and the Site's ``read-log`` results (seed 001, Private
Run log commands; docs/runs.md, Reading logs).

``ReadRunLog`` runs in the CommandServer's transaction: it checks ``runs.read``
now, that the Run is in the Project and that the Attempt has reached its Site (any
state but ``pending``; it may still be running), then records
the read (state ``pending``, deadline = PostgreSQL's now + ``log_read_seconds``)
and writes the ``read-log`` ``AppendSiteCommand`` to the outbox in the same
transaction. The Site command's id is derived from the read id, so a re-sent
append names the same command. The Site Runtime checks the viewer's read permit
at the Site edge before it returns any text.

The consumer of ``SiteCommandResultRecorded`` (kind ``read-log``) stores the
answer once, in its inbox transaction: ``ready`` with the text, or ``refused``
with the Site's code. A read not answered before its deadline is reported
``expired``; a result arriving later leaves it expired.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.application.ports import (
    LogReadStore,
    MessageOutbox,
    ProjectAuthority,
    RunStore,
)
from execution_core.application.requests import _ID, _check_permission, _require, _require_run_id
from execution_core.application.settings import Settings
from execution_core.domain import log_reads as lr
from execution_core.domain import reasons
from execution_core.domain.canonical import canonical_json
from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import PoisonMessage, Rejected
from metallo.site_coordination.v1 import site_coordination_pb2 as sc

log = logging.getLogger(__name__)

READ_LOG = "read-log"


async def read_run_log(
    session: AsyncSession,
    cmd: pb.ReadRunLog,
    *,
    store: RunStore,
    reads: LogReadStore,
    authority: ProjectAuthority,
    outbox: MessageOutbox,
    settings: Settings,
) -> pb.ReadRunLogReply:
    """Record a log read of ``cmd.stage`` of Attempt ``cmd.attempt_number`` (0 = latest)
    and send its ``read-log`` Site command; reply with the read id (state ``pending``).

    With ``cmd.offset`` set the Site returns at most ``max_bytes`` from that byte on
    instead of the tail (following a growing log: docs/runs.md, Following a log).
    Answered reads older than ``settings.log_read_retention_seconds`` are deleted here,
    at most 100 per call.

    Raises Rejected ``invalid-argument`` (stage not stage-in/compute/stage-out,
    attempt_number < 0, max_bytes outside 0 … 5 MiB — 0 means 5 MiB — or a negative
    offset), ``permission-denied`` (no ``runs.read`` now), ``not-found`` (no such Run
    in the Project, or no such Attempt) and ``attempt-not-at-site`` (the Attempt is
    ``pending``: its Site has not been sent it yet).
    """
    meta = cmd.metadata
    _require(bool(_ID.match(meta.project)), "metadata.project is required")
    _require(bool(_ID.match(meta.acting_member)), "metadata.acting_member is required")
    _require(
        bool(meta.command_id) and len(meta.command_id) <= 200, "metadata.command_id is required"
    )
    _require_run_id(cmd.run_id)
    _require(cmd.stage in lr.STAGES, f"stage must be one of {', '.join(lr.STAGES)}")
    _require(cmd.attempt_number >= 0, "attempt_number must be ≥ 0 (0 = the latest)")
    try:
        max_bytes = lr.effective_max_bytes(cmd.max_bytes)
        offset = lr.check_offset(cmd.offset) if cmd.HasField("offset") else None
    except ValueError as exc:
        raise Rejected(reasons.INVALID_ARGUMENT, str(exc)) from exc
    _check_permission(authority, meta.project, meta.acting_member, "runs.read")
    run = await store.find_run(session, cmd.run_id)
    if run is None or run["project"] != meta.project:
        raise Rejected(reasons.NOT_FOUND, f"no Run {cmd.run_id} in Project {meta.project}")
    attempt = lr.pick_attempt(await store.attempts_of(session, cmd.run_id), cmd.attempt_number)
    if attempt is None:
        which = "no Attempt" if cmd.attempt_number == 0 else f"no Attempt {cmd.attempt_number}"
        raise Rejected(reasons.NOT_FOUND, f"Run {cmd.run_id} has {which}")
    if not lr.readable(attempt["state"]):
        raise Rejected(
            reasons.ATTEMPT_NOT_AT_SITE,
            f"Attempt {attempt['number']} of Run {cmd.run_id} has not been sent to its "
            f"Site yet (state {attempt['state']}); its logs can be read once it has",
            {"attempt_state": attempt["state"]},
        )
    read_id = lr.read_id_for(meta.project, meta.command_id)
    existing = await reads.find_read(session, read_id)
    if existing is not None:
        return pb.ReadRunLogReply(read_id=read_id, state=existing["state"])
    now = await store.now(session)
    command_id = lr.site_command_id_for(read_id)
    await reads.insert_read(
        session,
        {
            "read_id": read_id,
            "command_id": command_id,
            "project": meta.project,
            "run_id": run["run_id"],
            "attempt_id": attempt["attempt_id"],
            "attempt_number": attempt["number"],
            "stage": cmd.stage,
            "max_bytes": max_bytes,
            "viewer": meta.acting_member,
            "site_id": run["site_id"],
            "environment": run["environment"],
            "state": lr.PENDING,
            "deadline_at": now + timedelta(seconds=settings.log_read_seconds),
            "requested_offset": offset,
        },
    )
    await reads.prune_reads(
        session, now - timedelta(seconds=settings.log_read_retention_seconds), limit=100
    )
    payload = {
        "stage": cmd.stage,
        "max_bytes": max_bytes,
        "viewer": meta.acting_member,
        "read_id": read_id,
    }
    if offset is not None:
        payload["offset"] = offset
    await outbox.send_command(
        session,
        sc.AppendSiteCommand(
            metadata=common_pb2.CommandMetadata(
                command_id=command_id, acting_member=meta.acting_member, project=meta.project
            ),
            site_id=run["site_id"],
            environment=run["environment"],
            kind=READ_LOG,
            run_id=run["run_id"],
            attempt_id=attempt["attempt_id"],
            attempt_number=attempt["number"],
            payload_json=canonical_json(payload),
        ),
        aggregate_id=f"run:{run['run_id']}",
    )
    return pb.ReadRunLogReply(read_id=read_id, state=lr.PENDING)


async def get_run_log_read(
    session: AsyncSession,
    q: pb.GetRunLogRead,
    *,
    store: RunStore,
    reads: LogReadStore,
    authority: ProjectAuthority,
) -> pb.RunLogRead:
    """The read and, when ``ready``, its text. Needs ``runs.read`` now; a read of another
    Project or of another viewer (a permit is for one viewer) is ``not-found``."""
    meta = q.metadata
    _require(
        bool(_ID.match(meta.project)) and bool(_ID.match(meta.acting_member)),
        "metadata is incomplete",
    )
    _require(bool(_ID.match(q.read_id)), "read_id is required")
    _check_permission(authority, meta.project, meta.acting_member, "runs.read")
    row = await reads.find_read(session, q.read_id)
    if row is None or row["project"] != meta.project or row["viewer"] != meta.acting_member:
        raise Rejected(reasons.NOT_FOUND, f"no log read {q.read_id} of yours in {meta.project}")
    state, expired_code = lr.visible_state(
        row["state"], row["deadline_at"], await store.now(session)
    )
    ready = state == lr.READY
    offsets = {
        "requested_offset": row.get("requested_offset"),
        "offset": row.get("text_offset") if ready else None,
        "next_offset": row.get("next_offset") if ready else None,
        "size": row.get("log_size") if ready else None,
    }
    return pb.RunLogRead(
        **{name: value for name, value in offsets.items() if value is not None},
        read_id=row["read_id"],
        run_id=row["run_id"],
        attempt_number=row["attempt_number"],
        stage=row["stage"],
        state=state,
        text=row["text"] if state == lr.READY else "",
        truncated=bool(row["truncated"]) if state == lr.READY else False,
        reason_code=expired_code or row["reason_code"],
    )


def _parse(event: sc.SiteCommandResultRecorded) -> dict:
    raw = event.result_json.encode("utf-8")
    if len(raw) > lr.MAX_LOG_RESULT_BYTES:
        raise PoisonMessage(f"log result of {len(raw)} bytes exceeds {lr.MAX_LOG_RESULT_BYTES}")
    try:
        result = json.loads(raw)
    except ValueError as exc:
        raise PoisonMessage(f"result_json is not JSON: {exc}") from exc
    if not isinstance(result, dict) or result.get("command_id") != event.command_id:
        raise PoisonMessage("result is not an object naming its command")
    return result


async def apply_log_result(
    session: AsyncSession,
    event: sc.SiteCommandResultRecorded,
    *,
    store: RunStore,
    reads: LogReadStore,
) -> None:
    """Store the Site's answer to a ``read-log`` command once (inbox transaction):
    ``ready`` with the text (at most the read's ``max_bytes``, the tail) or ``refused``
    with the Site's code; ``expired`` when it came after the read's deadline. Raises
    PoisonMessage for a result that is too large or not JSON."""
    row = await reads.find_read_by_command(session, event.command_id, for_update=True)
    if row is None:
        log.info("read-log result for unknown command %s ignored", event.command_id)
        return
    if row["state"] != lr.PENDING:
        return  # the first answer (or the expiry) stands
    result = _parse(event)
    now = await store.now(session)
    if now >= row["deadline_at"]:
        values = {"state": lr.EXPIRED, "reason_code": lr.EXPIRED_CODE, "answered_at": now}
    else:
        answer = lr.answer_from_result(result, row["max_bytes"], row.get("requested_offset"))
        values = {
            "state": answer.state,
            "text": answer.text,
            "truncated": answer.truncated,
            "reason_code": answer.reason_code,
            "message": answer.message,
            "answered_at": now,
            "text_offset": answer.text_offset,
            "next_offset": answer.next_offset,
            "log_size": answer.log_size,
        }
    await reads.answer_read(session, row["read_id"], values)
