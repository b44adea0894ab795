"""Settling a Pipeline's facts and planning its next outside call, over its step graph.

:func:`settle` applies what the Pipeline holds — Run ends, a stop, needs that
ended — and decides every step that can be decided: a step whose needs ended
otherwise than its ``when`` asks is ``skipped`` with the reason, never left
waiting. The Pipeline ends once every step has ended (a ready service counts
as done): ``failed`` when any step failed or had its Run cancelled from outside
(``partial`` when others succeeded), else ``succeeded``. A failing branch does
not stop the others: they run to their end first.

:func:`plan` returns the one outside call due now: cancellations first, then
launches of pinned steps, then pins of steps whose needs allow them (while
fewer than ``max_active`` steps are active), then observations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from pipeline_coordination.domain import collection_rerun, collection_schedule, graph
from pipeline_coordination.domain.collection import R_COLLECTION_CANCELLED
from pipeline_coordination.domain.pipeline import (
    CANCELLED,
    CANCELLING,
    DESIRED_STOP,
    FAILED,
    LAUNCHED,
    LAUNCHING,
    MAX_REASON,
    PINNED,
    PIPELINE_TERMINAL,
    PREPARING,
    R_RUN_CANCELLED,
    R_RUN_FAILED,
    R_STOPPED,
    READY,
    RUNNING,
    SKIPPED,
    STEP_FAILED,
    STEP_OF_OUTCOME,
    STEP_SUCCEEDED,
    STOPPED,
    STOPPING,
    SUCCEEDED,
    WAITING,
    Effect,
    Pipeline,
    Plan,
    Settled,
    Step,
    Timing,
    needs_cancel,
)

# Why a step was skipped (its reason_code; docs/pipelines.md)
R_NEEDS_NOT_SUCCEEDED = "needs-not-succeeded"
R_NEEDS_SUCCEEDED = "needs-succeeded"

ACTIVE = frozenset({PINNED, LAUNCHING, LAUNCHED, CANCELLING})
_ENDED = frozenset({STEP_SUCCEEDED, STEP_FAILED, CANCELLED, SKIPPED})


def ended(s: Step) -> bool:
    """The step will not change any more as far as its dependents go (a ready service counts)."""
    return s.state in _ENDED or s.done


def failed_step(s: Step) -> bool:
    """The step failed, or its Run was cancelled from outside the Pipeline."""
    return s.state == STEP_FAILED or (s.state == CANCELLED and not s.cancel_requested)


def succeeded_for_dependents(p: Pipeline, s: Step, memo: dict[int, bool] | None = None) -> bool:
    """Whether ``s`` counts as succeeded for the ``when`` of the steps that need it.

    A skipped step counts as what made it skip: it did not succeed when one of its
    own needs did not (graph.py's module doc). The graph is acyclic, so this ends.
    """
    memo = {} if memo is None else memo
    if s.index in memo:
        return memo[s.index]
    if s.state == SKIPPED:
        value = all(succeeded_for_dependents(p, p.step(i), memo) for i in s.needs)
    else:
        value = s.done
    memo[s.index] = value
    return value


def eligible(p: Pipeline, s: Step, memo: dict[int, bool]) -> bool | None:
    """For a waiting step: True (may start), False (must be skipped), None (not decided yet).

    ``when: success`` is decided as soon as one need ended without succeeding; the
    others wait until every need has ended.
    """
    needs = [p.step(i) for i in s.needs]
    if not all(ended(n) for n in needs):
        if s.when == graph.SUCCESS and any(ended(n) and not succeeded_for_dependents(p, n, memo) for n in needs):
            return False
        return None
    return graph.condition_met(s.when, [succeeded_for_dependents(p, n, memo) for n in needs])


def _skip_reason(p: Pipeline, s: Step, memo: dict[int, bool]) -> tuple[str, str]:
    if s.when == graph.FAILURE:
        return R_NEEDS_SUCCEEDED, "skipped: every step it needs succeeded (when: failure)"
    bad = [p.step(i) for i in s.needs if ended(p.step(i)) and not succeeded_for_dependents(p, p.step(i), memo)]
    names = ", ".join(f"{n.index} ({n.action}, {n.state})" for n in bad)
    return R_NEEDS_NOT_SUCCEEDED, f"skipped: needs step {names} (when: success)"[:MAX_REASON]


def _decide_waiting(p: Pipeline, now: datetime) -> Pipeline:
    """Skip every waiting step whose needs ended otherwise than its ``when`` (to a fixed point)."""
    changed = True
    while changed:
        changed = False
        memo: dict[int, bool] = {}
        for s in p.steps:
            if s.state == WAITING and eligible(p, s, memo) is False:
                code, message = _skip_reason(p, s, memo)
                p = p.with_step(replace(s, state=SKIPPED, reason_code=code, message=message, ended_at=now))
                changed = True
                break
    return p


def _outcome(p: Pipeline, now: datetime) -> Pipeline:
    """Every step ended: the Pipeline's outcome aggregates all of them (first failed step named)."""
    failed = [s for s in p.steps if failed_step(s)]
    if not failed:
        return replace(p, state=SUCCEEDED, ended_at=now)
    first = failed[0]
    if first.state == STEP_FAILED:
        code, message = first.reason_code or R_RUN_FAILED, first.message or f"step {first.index} ({first.action}) failed"
    elif first.is_collection:
        code = first.reason_code or R_COLLECTION_CANCELLED
        message = f"the collection of step {first.index} ({first.action}) was cancelled" + (
            f": {first.message}" if first.message else "")
    else:
        code, message = R_RUN_CANCELLED, f"the Run of step {first.index} ({first.action}) was cancelled"
    if len(failed) > 1:
        message = f"{message} (and {len(failed) - 1} other step(s) failed)"
    return replace(
        p, state=FAILED, failed_step=first.index, reason_code=code, message=message[:MAX_REASON], ended_at=now
    )


def settle(p: Pipeline, now: datetime) -> Settled:
    """Apply the facts the Pipeline holds: Run ends, a stop, needs that ended, the last step done.

    Returns the new Pipeline; ``completed`` is True when it just reached
    ``succeeded``, ``failed`` or ``stopped`` (the PipelineCompleted moment).
    Idempotent: settling a settled Pipeline changes nothing.
    """
    start = p
    # A Run's end decides its step, whatever the Pipeline does.
    steps = []
    for s in p.steps:
        if s.is_collection:
            s = collection_schedule.settle_step(p, s, now)
        elif s.run_outcome and s.state in (LAUNCHING, LAUNCHED, READY, CANCELLING):
            s = replace(s, state=STEP_OF_OUTCOME[s.run_outcome], ended_at=s.ended_at or now)
        steps.append(s)
    p = replace(p, steps=tuple(steps))

    if p.state == PREPARING and p.desired_state == DESIRED_STOP:
        p = replace(p, state=STOPPED, reason_code=R_STOPPED, ended_at=now)
    elif p.state == RUNNING and p.desired_state == DESIRED_STOP:
        p = replace(p, state=STOPPING, reason_code=R_STOPPED)
    if p.state == RUNNING:
        p = _decide_waiting(p, now)
        if p.steps and all(ended(s) for s in p.steps):
            p = _outcome(p, now)
    if p.state == STOPPING:
        p = replace(
            p,
            steps=tuple(
                replace(s, state=SKIPPED, reason_code=s.reason_code or R_STOPPED, ended_at=now)
                if s.state in (WAITING, PINNED) else s
                for s in p.steps
            ),
        )
        if not any(s.awaiting_end for s in p.steps):
            p = replace(p, state=STOPPED, ended_at=now)
    p = _close_unstarted_children(p, now)
    completed = start.state not in PIPELINE_TERMINAL and p.state in PIPELINE_TERMINAL
    return Settled(pipeline=p, completed=completed, changed=p != start)


def _close_unstarted_children(p: Pipeline, now: datetime) -> Pipeline:
    """No child is left waiting under a collection step that ended (a rerun's, recorded before it started)."""
    for s in p.steps:
        if s.is_collection and s.items and s.state != LAUNCHED:
            items = collection_rerun.close_unstarted(s.items, s.state, s.reason_code, now)
            if items != s.items:
                p = p.with_step(replace(s, items=items))
    return p


# ---------------------------------------------------------------- what to do next


def _due(last: datetime | None, every: float, now: datetime) -> float:
    """Seconds until ``every`` seconds after ``last`` (0 when due or never done)."""
    if last is None:
        return 0.0
    return max(0.0, (last + timedelta(seconds=every) - now).total_seconds())


@dataclass(frozen=True)
class _Candidates:
    """What the settled Pipeline could do now, by kind, in step order."""

    launches: list[Step]
    pins: list[Step]
    observes: list[tuple[float, Step, str]]  # (wait, step, kind)


def _candidates(p: Pipeline, now: datetime, timing: Timing) -> _Candidates:
    memo: dict[int, bool] = {}
    launches, pins, observes = [], [], []
    for s in p.steps:
        if s.state in (PINNED, LAUNCHING):
            launches.append(s)
        elif s.state == WAITING and eligible(p, s, memo):
            pins.append(s)
        elif s.state == LAUNCHED and s.is_service:
            if s.started_at is not None and now - s.started_at >= timedelta(seconds=timing.service_ready_timeout):
                observes.append((0.0, s, "service-timeout"))
            else:
                observes.append((_due(s.observed_at, timing.service_poll, now), s, "observe"))
        elif s.state in (LAUNCHED, CANCELLING) and s.awaiting_end and s.run_id:
            # The RunCompleted event is the signal; the re-read only guards against a lost one.
            observes.append((_due(s.observed_at or s.started_at, timing.batch_recheck, now), s, "observe"))
    return _Candidates(launches, pins, observes)


def active_count(p: Pipeline) -> int:
    """Steps started and not yet ended (a ready service no longer counts)."""
    return sum(1 for s in p.steps if s.state in ACTIVE)


def plan(p: Pipeline, now: datetime, timing: Timing) -> Plan:
    """The outside call due now for a settled Pipeline, or when to look again."""
    if p.state == PREPARING:
        return Plan(Effect("prepare-branch"))
    # Cancellation first: it stops work, so it never waits behind anything else.
    for s in p.steps:
        if needs_cancel(p, s):
            return Plan(Effect("cancel", s.index))
    children = [collection_schedule.candidates(p, s, now, timing) for s in p.steps if s.is_collection]
    for c in children:
        if c.cancels:
            return Plan(c.cancels[0])
    child_observes = [o for c in children for o in c.observes]
    if p.state == STOPPING:
        for c in children:
            if c.launches:
                return Plan(c.launches[0])  # launching children only: re-sent to learn their Run
        for s in p.steps:
            if s.state == LAUNCHING and s.awaiting_end:
                # The launch may have been made: re-send it (same command_id) to learn its Run.
                return Plan(Effect("launch", s.index))
        waits = [(_due(s.observed_at, timing.batch_recheck, now), Effect("observe", s.index))
                 for s in p.steps if s.run_id and s.awaiting_end] + child_observes
        return _soonest(waits)
    if p.state != RUNNING:
        return Plan(None, None)
    c = _candidates(p, now, timing)
    if c.launches:
        return Plan(Effect("launch", c.launches[0].index))
    for child in children:
        if child.launches:
            return Plan(child.launches[0])
    if c.pins and active_count(p) < p.max_active:
        return Plan(Effect("pin", c.pins[0].index))
    return _soonest([(w, Effect(kind, s.index)) for w, s, kind in c.observes] + child_observes)


def _soonest(waits: list[tuple[float, Effect]]) -> Plan:
    """The observation due first (by wait, then step and child), or when to look again."""
    if not waits:
        return Plan(None, None)
    wait, effect = min(waits, key=lambda w: (w[0], w[1].step, w[1].item))
    return Plan(effect) if wait == 0.0 else Plan(None, wait)


def retry_delay(p: Pipeline, timing: Timing) -> float:
    """Seconds to wait after ``p.retries`` temporary failures in a row (doubling, capped)."""
    return min(timing.retry_max, timing.retry_base * (2 ** max(0, p.retries - 1)))


def counts(p: Pipeline) -> dict[str, int]:
    """How many steps are in each condition (StepCounts; every step counted once)."""
    out = dict.fromkeys(("waiting", "active", "succeeded", "failed", "cancelled", "skipped"), 0)
    for s in p.steps:
        if s.done:
            out["succeeded"] += 1
        elif s.state in ACTIVE:
            out["active"] += 1
        elif s.state == STEP_FAILED:
            out["failed"] += 1
        elif s.state == CANCELLED:
            out["cancelled"] += 1
        elif s.state == SKIPPED:
            out["skipped"] += 1
        else:
            out["waiting"] += 1
    out["total"] = len(p.steps)
    return out


def partial(p: Pipeline) -> bool:
    """The Pipeline failed while some of its steps succeeded."""
    return p.state == FAILED and any(s.done for s in p.steps)
