"""The Run lifecycle as a pure decision (seed 004 §4D, §4E, §7C; seed 002 §9.2, §9.3).

The Run Supervisor loads a Run, its current Attempt and that Attempt's Site
commands (with any recorded results), calls :func:`decide` with PostgreSQL's
``now``, and persists the returned :class:`Decision` in one fenced transaction.
Nothing here performs I/O, so every rule is testable on its own.

Rules kept here:

- one command at a time per Attempt, in family order: ``prepare → start →
  observe…`` (queued-batch) or ``apply → observe…`` (reconciled-service);
- a command is decided once: the supervisor never sends a second
  ``prepare``/``start``/``apply``/``cancel``/``terminate`` for an Attempt;
- an uncertain native start (start sent, no result) is never repeated; a
  cancellation or the dispatch deadline stops it under the same Attempt identity;
- terminal native evidence comes only from ``observe`` results, and after a
  cancel/terminate only from an ``observe`` sent after that command;
- a later, lower-ranked observation never moves an Attempt backwards;
- a retry is a new Attempt, only after a definite failure and within the
  Workload's retry policy; a lost Attempt is retried only when the action opts in
  (``retry.onLost``);
- an Attempt the Site answers it does not know is asked about with back-off and
  ends ``lost`` after the reconciliation period, or sooner by an operator's
  ``mark-lost`` (:mod:`~execution_core.domain.reconciliation`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from execution_core.domain import arrays, observations, reasons
from execution_core.domain import attempt_outcomes as ao
from execution_core.domain import reconciliation as rec
from execution_core.domain import states as s
from execution_core.domain.lifecycle_facts import (
    AttemptUpdate,
    AttemptView,
    CommandFact,
    Decision,
    RunView,
    Timing,
    iso_utc,
    kinds,
    prepare_payload,
)

__all__ = [
    "AttemptUpdate",
    "AttemptView",
    "CommandFact",
    "Decision",
    "RunView",
    "Timing",
    "decide",
    "iso_utc",
    "kinds",
    "prepare_payload",
]


def _first(cmds: tuple[CommandFact, ...], kind: str) -> CommandFact | None:
    for c in cmds:
        if c.kind == kind:
            return c
    return None


def decide(run: RunView, attempt: AttemptView | None, now: datetime, t: Timing) -> Decision:
    """Decide the Run's next step from its saved facts and PostgreSQL's ``now``.

    Returns a :class:`Decision`; when nothing changes it still names ``wake_at``.
    A Run that is already terminal yields a Decision with ``phase="terminal"``
    and no commands (a terminal Run never moves).
    """
    if run.phase == s.PHASE_TERMINAL:
        return Decision(
            phase=s.PHASE_TERMINAL,
            desired_state=run.desired_state,
            cancel_origin=run.cancel_origin,
            attempt=None,
        )
    if attempt is None:
        return ao.without_attempt(run, now, t)

    prep_kind, start_kind, stop_kind = kinds(run.family)
    cmds = attempt.commands
    prep, start, stop = _first(cmds, prep_kind), _first(cmds, start_kind), _first(cmds, stop_kind)
    # A dispatched array group's start-array is the child's own (uncertain) start.
    start = start or arrays.pending_start(attempt.array)
    obs = observations.merge(attempt.commands, stop)
    d = Decision(
        phase=run.phase,
        desired_state=run.desired_state,
        cancel_origin=run.cancel_origin,
        attempt=AttemptUpdate(
            state=attempt.state,
            native_jobs=obs.jobs,
            observation_phase=obs.phase,
            native_state=obs.native_state,
        ),
        observation_phase=obs.phase,
        native_state=obs.native_state,
        confidence=rec.confidence(
            cmds,
            start=start,
            phase=obs.phase,
            deferred_command_id=attempt.deferred_command_id,
            now=now,
            stale_after=t.stale_after,
            observe_interval=t.observe_interval,
        ),
        output_commit=obs.output_commit,
        endpoint=obs.endpoint,
        native_wait=obs.native_wait,
        native_stage=obs.native_stage,
        waiting_reason="",
    )
    assert d.attempt is not None

    if attempt.state in s.ATTEMPT_TERMINAL:
        return ao.after_terminal_attempt(run, attempt, d, now, t)

    # 1. Definite facts first: refusals and terminal observations end the Attempt.
    if prep is not None and prep.outcome == "refused":
        return ao.attempt_ended(
            run,
            attempt,
            d,
            s.ATTEMPT_REFUSED,
            prep.code or reasons.NATIVE_FAILURE,
            permanent=True,
            now=now,
            t=t,
        )
    if start is not None and start.outcome == "refused":
        code = start.code or reasons.NATIVE_FAILURE
        return ao.attempt_ended(
            run,
            attempt,
            d,
            s.ATTEMPT_REFUSED,
            code,
            permanent=code in reasons.PERMANENT_SITE_REFUSALS,
            now=now,
            t=t,
        )
    if obs.terminal is not None:
        d.exit = observations.exit_facts(obs.terminal)
        d.attempt.exit = d.exit
        phase = obs.terminal["phase"]
        if phase == s.OBS_SUCCEEDED:
            return ao.attempt_ended(
                run,
                attempt,
                d,
                s.ATTEMPT_SUCCEEDED,
                reasons.COMPLETED,
                permanent=True,
                now=now,
                t=t,
            )
        if phase == s.OBS_CANCELLED:
            return ao.attempt_ended(
                run, attempt, d, s.ATTEMPT_CANCELLED, "", permanent=True, now=now, t=t
            )
        code = (obs.terminal.get("failure") or {}).get("code") or reasons.NATIVE_FAILURE
        return ao.attempt_ended(
            run,
            attempt,
            d,
            s.ATTEMPT_FAILED,
            code,
            permanent=code in reasons.PERMANENT_FAILURES,
            now=now,
            t=t,
            outcome=s.OUTCOME_TIMED_OUT if code in reasons.TIMED_OUT_FAILURES else s.OUTCOME_FAILED,
        )

    # 1b. Lost Attempts: the Site does not know an Attempt whose start was sent.
    quiet = rec.Silence() if start is None else rec.silence(cmds, after_seq=start.seq)
    if start is not None and attempt.lost_marked:
        return ao.attempt_lost(run, attempt, d, reasons.MARKED_LOST, now)
    lost_at = quiet.lost_at(t.lost_after)
    if lost_at is not None and now >= lost_at:
        return ao.attempt_lost(run, attempt, d, reasons.LOST_AT_SITE, now)
    if lost_at is not None:
        d.waiting_reason = reasons.WAIT_ATTEMPT_UNKNOWN_AT_SITE

    start_accepted = start is not None and start.outcome == "succeeded"
    if start_accepted:
        d.attempt.started = True
        if not run.started:
            d.emit_started = True

    # 2. The dispatch deadline: a native start not accepted in time ends the Run.
    if (
        run.desired_state == s.DESIRED_RUN
        and not start_accepted
        and now >= attempt.dispatch_deadline
    ):
        if start is None:
            return ao.end_without_native_work(
                d, prep, stop, stop_kind, s.OUTCOME_FAILED, reasons.DISPATCH_DEADLINE_PASSED, now
            )
        # The start is uncertain: stop it under the same Attempt identity, then observe.
        d.desired_state = s.DESIRED_CANCEL
        d.cancel_origin = "deadline"

    # 3. Cancellation (seed 004 §7C).
    if d.desired_state == s.DESIRED_CANCEL:
        reason = (
            reasons.DISPATCH_DEADLINE_PASSED
            if d.cancel_origin == "deadline"
            else reasons.CANCELLED_BY_MEMBER
        )
        outcome = s.OUTCOME_FAILED if d.cancel_origin == "deadline" else s.OUTCOME_CANCELLED
        if start is None:
            # Never started: no start will ever be sent (fenced here); a prepared
            # workspace is cleaned up by a stop command.
            code = reasons.CANCELLED_BEFORE_START if d.cancel_origin != "deadline" else reason
            return ao.end_without_native_work(d, prep, stop, stop_kind, outcome, code, now)
        d.phase = s.PHASE_CANCELLING
        d.attempt.state = s.ATTEMPT_CANCELLING
        if stop is None:
            d.commands.append((stop_kind, {"reason": reason}))
            d.wake_at = now + timedelta(seconds=t.result_recheck)
            return d
        return ao.stop_loop(attempt, d, now, t, stop_kind, reason, quiet=quiet)

    # 3b. A ``require`` array group that cannot start as one array ends its children.
    if start is None and attempt.array is not None and attempt.array.state == arrays.FAILED:
        return ao.end_without_native_work(
            d, prep, stop, stop_kind, s.OUTCOME_FAILED, reasons.ARRAY_UNAVAILABLE, now
        )

    # 4. The normal path.
    if prep is None:
        d.commands.append((prep_kind, prepare_payload(run.material, attempt.dispatch_deadline)))
        d.phase = s.PHASE_PREPARING
        d.attempt.state = s.ATTEMPT_PREPARING
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline)
        return d
    if prep.outcome is None:
        d.phase = s.PHASE_PREPARING
        d.attempt.state = s.ATTEMPT_PREPARING
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline)
        return d
    if start is None and arrays.holds_start(attempt.array):
        # Prepared; the group's one start-array waits for its siblings (bounded by the
        # group's deadline, then the child starts on its own or fails).
        d.phase = s.PHASE_PREPARING
        d.attempt.state = s.ATTEMPT_PREPARED
        forming = attempt.array.state == arrays.FORMING
        d.waiting_reason = (reasons.WAIT_ARRAY_GROUP_FORMING if forming
                            else reasons.WAIT_ARRAY_MAX_ACTIVE)
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline,
                        *([attempt.array.deadline] if forming else []))
        return d
    if start is None:
        d.commands.append((start_kind, {}))
        d.phase = s.PHASE_STARTING
        d.attempt.state = s.ATTEMPT_STARTING
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline)
        return d
    if start.outcome is None:
        d.phase = s.PHASE_STARTING
        d.attempt.state = s.ATTEMPT_STARTING
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline)
        return d
    d.attempt.state = s.ATTEMPT_ACTIVE
    if obs.phase == s.OBS_RUNNING:
        d.phase = s.PHASE_RUNNING
    elif obs.phase == s.OBS_QUEUED or run.family == s.QUEUED_BATCH:
        d.phase = s.PHASE_QUEUED
    else:
        d.phase = s.PHASE_STARTING
    return ao.observe_loop(attempt, d, now, t, after=start, quiet=quiet)
