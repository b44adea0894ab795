"""LaunchRun, CancelRun, GetRun and ListRuns (seed 004 §3B, §7C, Run access).

Each function runs inside the transaction the CommandServer opens for the
command (with its receipt and reply) or for the query. A definite refusal
raises :class:`metallo.messaging.Rejected` with a stable code, which rolls the
transaction's writes back and is saved for the command_id.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.application.ports import (
    AuthorityUnavailable,
    MessageOutbox,
    ProjectAuthority,
    RunStore,
)
from execution_core.application.projection import run_completed, run_message
from execution_core.application.transitions import record_transition
from execution_core.domain import arrays, reasons
from execution_core.domain import states as s
from execution_core.domain.end_messages import site_end_message
from metallo import parameters
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected

if TYPE_CHECKING:
    from execution_core.application.array_groups import ArrayGroups

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_LABELS = 16
MAX_LABEL_VALUE = 200
MAX_REASON = 500
DEFAULT_PAGE = 50
MAX_PAGE = 200


# Run ids are the lowercase UUIDs Execution Core gives at acceptance.
_RUN_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise Rejected(reasons.INVALID_ARGUMENT, message)


def _require_run_id(run_id: str) -> None:
    """Raise Rejected ``invalid-argument`` unless ``run_id`` has a Run id's form
    (a lowercase UUID): a malformed id is a wrong request, not a missing Run."""
    if not run_id:
        raise Rejected(reasons.INVALID_ARGUMENT, "run_id is required")
    if not _RUN_ID.match(run_id):
        raise Rejected(reasons.INVALID_ARGUMENT,
                       f"run_id {run_id[:80]!r} is not a Run id (a lowercase UUID, as Runs are listed)")


def _check_permission(
    authority: ProjectAuthority, project: str, member: str, capability: str
) -> None:
    """Ask the Project authority now (never cached as a verdict: seed 004, Run access).

    A refusal says which it is: ``project-not-found`` for a Project the authority does
    not know, ``permission-denied`` for a non-member or a member without
    ``capability``. Only the Project asked for is named — never another Project.
    An authority that cannot answer gives a transient ``governance-unavailable``
    rejection (replied, not saved: a retry with the same command_id decides afresh).
    """
    try:
        allowed = authority.has_capability(project, member, capability)
        if allowed:
            return
        known = authority.project_exists(project)
        member_of = known and authority.is_member(project, member)
    except AuthorityUnavailable as exc:
        raise Rejected(reasons.WAIT_GOVERNANCE_UNAVAILABLE, str(exc), transient=True) from exc
    if not known:
        raise Rejected(reasons.PROJECT_NOT_FOUND,
                       f"Project {project} is unknown to the Project authority")
    raise Rejected(
        reasons.PERMISSION_DENIED,
        f"member {member} does not hold {capability} in Project {project}"
        + ("" if member_of else f" (not a member of Project {project})"),
        {"capability": capability},
    )


async def launch_run(
    session: AsyncSession,
    cmd: pb.LaunchRun,
    *,
    store: RunStore,
    authority: ProjectAuthority,
    outbox: MessageOutbox,
    groups: ArrayGroups | None = None,
) -> pb.LaunchRunReply:
    """Accept a launch: check ``runs.launch`` now, record the request and the member
    (and a collection child's array group and index, ADR 0032).

    Returns the new Run's id in phase ``accepted`` (planning follows in the
    launch worker). With a ``launch_key`` already used in the Project for the
    same workload and revision, returns that Run; for another one raises
    Rejected ``launch-key-conflict``. Raises Rejected ``invalid-argument`` or
    ``permission-denied``.
    """
    meta = cmd.metadata
    _require(bool(_ID.match(meta.project)), "metadata.project is required")
    _require(bool(_ID.match(meta.acting_member)), "metadata.acting_member is required")
    _require(bool(_ID.match(cmd.workload_id)), "workload_id is required (≤ 200 characters)")
    _require(cmd.revision >= 1, "revision must be ≥ 1")
    _require(len(cmd.launch_key) <= 200, "launch_key is longer than 200 characters")
    _require(
        not cmd.repository_commit or bool(_COMMIT.match(cmd.repository_commit)),
        "repository_commit must be 40 hex",
    )
    _require(len(cmd.labels) <= MAX_LABELS, f"at most {MAX_LABELS} labels")
    for k, v in cmd.labels.items():
        _require(
            bool(_LABEL_KEY.match(k)) and len(v) <= MAX_LABEL_VALUE,
            f"label {k[:64]!r} is not acceptable",
        )
    try:
        parameters.check(dict(cmd.parameters))
    except parameters.ParameterError as e:
        raise Rejected(reasons.INVALID_ARGUMENT, f"parameters: {e}"[:1000]) from None
    group = None
    if cmd.HasField("array_group"):
        g = cmd.array_group
        group = arrays.GroupRequest(g.group_id, g.size, g.index, g.max_active, g.mode)
        _require(groups is not None, "array groups are not served here")
        _require(not arrays.check_request(group), arrays.check_request(group))
    _check_permission(authority, meta.project, meta.acting_member, "runs.launch")

    if cmd.launch_key:
        existing = await store.find_by_launch_key(session, meta.project, cmd.launch_key)
        if existing is not None:
            same = (
                existing["workload_id"] == cmd.workload_id
                and existing["revision"] == cmd.revision
                and existing["repository_commit"] == cmd.repository_commit
                and (existing.get("parameters") or {}) == dict(cmd.parameters)
                and existing.get("array_group_id", "") == (group.group_id if group else "")
            )
            if not same:
                raise Rejected(
                    reasons.LAUNCH_KEY_CONFLICT,
                    f"launch_key {cmd.launch_key!r} already launched another revision, commit or parameters",
                    {"run_id": existing["run_id"]},
                )
            return pb.LaunchRunReply(
                run_id=existing["run_id"], phase=existing["phase"], version=existing["version"]
            )

    reply = await accept_run(
        session,
        store,
        outbox,
        {
            "project": meta.project,
            "workload_id": cmd.workload_id,
            "revision": cmd.revision,
            "initiating_member": meta.acting_member,
            "launch_command_id": meta.command_id,
            "launch_key": cmd.launch_key or None,
            "labels": dict(cmd.labels),
            "repository_commit": cmd.repository_commit,
            "parameters": dict(cmd.parameters),
            "array_group_id": group.group_id if group else "",
        },
    )
    if group is not None and groups is not None:
        await groups.register(session, group, reply.run_id, meta.project)
    return reply


async def accept_run(
    session: AsyncSession, store: RunStore, outbox: MessageOutbox, values: dict
) -> pb.LaunchRunReply:
    """Insert a new Run in phase ``accepted`` from ``values`` (the launch's columns), with its
    first transition and ``RunAccepted``, in the caller's transaction; return the reply."""
    run_id = str(uuid.uuid4())
    values = {**values, "run_id": run_id, "phase": s.PHASE_ACCEPTED, "desired_state": s.DESIRED_RUN}
    await store.insert_run(session, values)
    await record_transition(
        session,
        store,
        None,
        {
            "run_id": run_id,
            "phase": s.PHASE_ACCEPTED,
            "desired_state": s.DESIRED_RUN,
            "attempt_count": 0,
        },
        1,
    )
    await outbox.publish_event(
        session,
        pb.RunAccepted(
            run_id=run_id,
            project=values["project"],
            workload_id=values["workload_id"],
            revision=values["revision"],
            initiating_member=values["initiating_member"],
            launch_command_id=values["launch_command_id"],
            launch_key=values["launch_key"] or "",
            labels=values["labels"],
        ),
        aggregate_id=f"run:{run_id}",
    )
    return pb.LaunchRunReply(run_id=run_id, phase=s.PHASE_ACCEPTED, version=1)


async def cancel_run(
    session: AsyncSession,
    cmd: pb.CancelRun,
    *,
    store: RunStore,
    authority: ProjectAuthority,
    outbox: MessageOutbox,
) -> pb.CancelRunReply:
    """Save the first accepted cancellation on the Run and wake its supervisor (seed 004 §7C).

    A Run still waiting for planning ends at once (``cancelled-before-start``,
    with RunCompleted in this transaction). A Run already cancelling or ended
    changes nothing (``cancel_recorded`` false). Raises Rejected
    ``invalid-argument``, ``not-found`` (also for another Project's Run) or
    ``permission-denied``.
    """
    meta = cmd.metadata
    _require(bool(_ID.match(meta.project)), "metadata.project is required")
    _require(bool(_ID.match(meta.acting_member)), "metadata.acting_member is required")
    _require_run_id(cmd.run_id)
    _require(len(cmd.reason) <= MAX_REASON, f"reason is longer than {MAX_REASON} characters")
    _check_permission(authority, meta.project, meta.acting_member, "runs.cancel")
    run = await store.find_run(session, cmd.run_id, for_update=True)
    if run is None or run["project"] != meta.project:
        raise Rejected(reasons.NOT_FOUND, f"no Run {cmd.run_id} in Project {meta.project}")

    def reply(r: dict, recorded: bool) -> pb.CancelRunReply:
        return pb.CancelRunReply(
            run_id=r["run_id"],
            cancel_recorded=recorded,
            desired_state=r["desired_state"],
            phase=r["phase"],
            outcome=r["outcome"],
            version=r["version"],
        )

    if run["phase"] == s.PHASE_TERMINAL or run["desired_state"] == s.DESIRED_CANCEL:
        return reply(run, False)
    now = await store.now(session)
    values = {
        "desired_state": s.DESIRED_CANCEL,
        "cancel_origin": "member",
        "cancel_reason": cmd.reason,
        "cancelled_by": meta.acting_member,
        "cancel_command_id": meta.command_id,
        "cancel_requested_at": now,
        "next_wake_at": now,  # wakes the supervisor in the same transaction
    }
    if run["phase"] == s.PHASE_ACCEPTED:
        values.update(
            phase=s.PHASE_TERMINAL,
            outcome=s.OUTCOME_CANCELLED,
            reason_code=reasons.CANCELLED_BEFORE_START,
            ended_at=now,
        )
    if not await store.update_run(session, run["run_id"], run["version"], values):
        raise RuntimeError(
            f"run {run['run_id']} changed under its row lock"
        )  # cannot happen; retried
    updated = {**run, **values, "version": run["version"] + 1}
    await record_transition(session, store, run, values, updated["version"])
    if updated["phase"] == s.PHASE_TERMINAL:
        await outbox.publish_event(
            session, run_completed(updated), aggregate_id=f"run:{run['run_id']}"
        )
    return reply(updated, True)


async def get_run(
    session: AsyncSession, q: pb.GetRun, *, store: RunStore, authority: ProjectAuthority
) -> pb.Run:
    """The Run with its Attempts and native identities; needs ``runs.read`` (else permission-denied).

    A Run of another Project is ``not-found``.
    """
    meta = q.metadata
    _require(
        bool(_ID.match(meta.project)) and bool(_ID.match(meta.acting_member)),
        "metadata is incomplete",
    )
    _require_run_id(q.run_id)
    _check_permission(authority, meta.project, meta.acting_member, "runs.read")
    run = await store.find_run(session, q.run_id)
    if run is None or run["project"] != meta.project:
        raise Rejected(reasons.NOT_FOUND, f"no Run {q.run_id} in Project {meta.project}")
    attempts = await store.attempts_of(session, q.run_id)
    message = run_message(run, attempts, await store.transitions_of(session, q.run_id))
    message.reason_message = await _reason_message(session, store, run, attempts)
    return message


async def _reason_message(
    session: AsyncSession, store: RunStore, run: dict, attempts: list[dict]
) -> str:
    """Words for the Run's reason code (a new user met ``invalid-material`` with none),
    at most 500 characters: when the current Attempt was refused, the message of its
    latest refused command; when planning rejected the launch or keeps it waiting,
    planning's message; when the Site ended the Attempt on its own (cancelled it, or its
    scheduler requeued it), what its exit facts say; else "" (a refused observe must not explain a compute failure,
    nor why it waited a Run cancelled before it started)."""
    current = next((a for a in attempts if a["attempt_id"] == run["current_attempt_id"]), None)
    if current is not None:
        if current["state"] != s.ATTEMPT_REFUSED:
            return site_end_message(current["reason_code"], current["exit"])[:500]
        for command in reversed(await store.commands_of(session, current["attempt_id"])):
            if command["outcome"] == "refused":
                return str((command["result"] or {}).get("message") or "")[:500]
        return ""
    if run["outcome"] == "cancelled":
        return ""  # a member stopped it: planning's last words (why it waited) do not explain that
    if run["reason_code"] or run["planning_wait_code"]:
        return (run["planning_error"] or "")[:500]
    return ""


def _encode_token(at: datetime, run_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([at.isoformat(), run_id]).encode()).decode()


def _decode_token(token: str) -> tuple[datetime, str]:
    try:
        at, run_id = json.loads(base64.urlsafe_b64decode(token.encode()))
        return datetime.fromisoformat(at), str(run_id)
    except (ValueError, TypeError) as exc:
        raise Rejected(reasons.INVALID_ARGUMENT, "page_token is not valid") from exc


async def list_runs(
    session: AsyncSession, q: pb.ListRuns, *, store: RunStore, authority: ProjectAuthority
) -> pb.ListRunsReply:
    """The Project's Runs, newest first, filtered and paginated; needs ``runs.read``.

    ``page.page_size`` 1..200 (0 = 50). Raises Rejected ``invalid-argument`` for a
    bad size, filter or token, ``permission-denied`` without ``runs.read``.
    """
    meta = q.metadata
    _require(
        bool(_ID.match(meta.project)) and bool(_ID.match(meta.acting_member)),
        "metadata is incomplete",
    )
    size = q.page.page_size or DEFAULT_PAGE
    _require(1 <= size <= MAX_PAGE, f"page_size must be 1..{MAX_PAGE}")
    _require(not q.phase or q.phase in s.RUN_PHASES, "unknown phase filter")
    _require(not q.outcome or q.outcome in s.OUTCOMES, "unknown outcome filter")
    _require(len(q.workload_id) <= 200, "workload_id is too long")
    _check_permission(authority, meta.project, meta.acting_member, "runs.read")
    after = _decode_token(q.page.page_token) if q.page.page_token else None
    rows = await store.list_runs(
        session,
        meta.project,
        workload_id=q.workload_id,
        phase=q.phase,
        outcome=q.outcome,
        active_only=q.active_only,
        after=after,
        limit=size + 1,
    )
    more = len(rows) > size
    rows = rows[:size]
    reply = pb.ListRunsReply(runs=[run_message(r) for r in rows])
    if more:
        reply.page.next_page_token = _encode_token(rows[-1]["accepted_at"], rows[-1]["run_id"])
    return reply
