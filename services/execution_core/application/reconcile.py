"""ReconcileRun: an operator ends a lost Attempt sooner (seed 002 §9.3, §18).

Runs in the CommandServer's transaction. The verdict comes from the pure rule
:func:`~execution_core.domain.reconciliation.mark_lost_verdict` over the Run's saved
facts and PostgreSQL's ``now``. A real decision appends its audit record
(``run_decisions``: actor, Run, Attempt, decision, reason, evidence, time), marks the
Attempt and wakes the supervisor — all in this one transaction — and the supervisor
then ends the Attempt ``lost`` (reason ``marked-lost``). A dry run changes nothing.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.application.ports import ProjectAuthority, RunStore
from execution_core.application.requests import (
    _ID,
    MAX_REASON,
    _check_permission,
    _require,
    _require_run_id,
)
from execution_core.application.settings import Settings
from execution_core.application.supervisor import command_fact
from execution_core.domain import lifecycle, reasons
from execution_core.domain import reconciliation as rec
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected

MARK_LOST = "mark-lost"
DECISIONS = (MARK_LOST,)


async def reconcile_run(
    session: AsyncSession,
    cmd: pb.ReconcileRun,
    *,
    store: RunStore,
    authority: ProjectAuthority,
    settings: Settings,
) -> pb.ReconcileRunReply:
    """Explain (``dry_run``) or record ``mark-lost`` for the Run's current Attempt.

    Needs ``runs.cancel``. Raises Rejected ``invalid-argument`` (bad id, decision or
    reason), ``not-found`` (also another Project's Run), ``permission-denied``, and —
    for a real decision only — ``not-reconcilable`` with the explanation when the Site
    still vouches for the Attempt.
    """
    meta = cmd.metadata
    _require(bool(_ID.match(meta.project)), "metadata.project is required")
    _require(bool(_ID.match(meta.acting_member)), "metadata.acting_member is required")
    _require_run_id(cmd.run_id)
    _require(cmd.decision in DECISIONS, f"decision must be one of {', '.join(DECISIONS)}")
    _require(len(cmd.reason) <= MAX_REASON, f"reason is longer than {MAX_REASON} characters")
    _check_permission(authority, meta.project, meta.acting_member, "runs.cancel")
    run = await store.find_run(session, cmd.run_id, for_update=True)
    if run is None or run["project"] != meta.project:
        raise Rejected(reasons.NOT_FOUND, f"no Run {cmd.run_id} in Project {meta.project}")
    now = await store.now(session)
    attempt = (
        await store.find_attempt(session, run["current_attempt_id"])
        if run["current_attempt_id"]
        else None
    )
    commands = (
        [command_fact(c) for c in await store.commands_of(session, attempt["attempt_id"])]
        if attempt is not None
        else []
    )
    start_kind = lifecycle.kinds(run["family"])[1] if run["family"] else "start"
    start = next((c for c in commands if c.kind == start_kind), None)
    quiet = rec.silence(commands, after_seq=start.seq) if start is not None else rec.Silence()
    timing = settings.timing()
    confidence = rec.confidence(
        commands,
        start=start,
        phase=run["observation_phase"],
        deferred_command_id=run["waiting_command_id"],
        now=now,
        stale_after=timing.stale_after,
        observe_interval=timing.observe_interval,
    )
    will_retry = bool(
        run["retry_on_lost"]
        and run["desired_state"] == "run"
        and attempt is not None
        and attempt["number"] < run["max_attempts"]
    )
    verdict = rec.mark_lost_verdict(
        phase=run["phase"],
        attempt_number=attempt["number"] if attempt else None,
        attempt_state=attempt["state"] if attempt else None,
        start=start,
        already_marked=bool(attempt and attempt["lost_marked_at"] is not None),
        silence_=quiet,
        confidence_=confidence,
        lost_after=timing.lost_after,
        will_retry=will_retry,
        now=now,
    )
    reply = pb.ReconcileRunReply(
        run_id=run["run_id"],
        decision=cmd.decision,
        dry_run=cmd.dry_run,
        eligible=verdict.eligible,
        explanation=verdict.explanation,
        attempt_number=attempt["number"] if attempt else 0,
        will_retry=will_retry and verdict.eligible,
        phase=run["phase"],
        outcome=run["outcome"],
        version=run["version"],
    )
    if cmd.dry_run:
        return reply
    if not verdict.eligible:
        raise Rejected(reasons.NOT_RECONCILABLE, verdict.explanation)
    assert attempt is not None
    if not await store.mark_attempt_lost(session, attempt["attempt_id"], meta.acting_member):
        raise RuntimeError(f"attempt {attempt['attempt_id']} changed under its Run's row lock")
    await store.append_decision(
        session,
        {
            "command_id": meta.command_id,
            "run_id": run["run_id"],
            "attempt_id": attempt["attempt_id"],
            "project": run["project"],
            "actor": meta.acting_member,
            "decision": cmd.decision,
            "reason": cmd.reason,
            "evidence": {
                "explanation": verdict.explanation,
                "confidence": confidence,
                "unknown_answers": quiet.answers,
                "unknown_since": quiet.since.isoformat() if quiet.since else None,
                "attempt_number": attempt["number"],
                "attempt_state": attempt["state"],
            },
        },
    )
    await store.wake_run(session, run["run_id"])  # the supervisor ends it at once
    reply.recorded = True
    reply.version = run["version"] + 1
    return reply
