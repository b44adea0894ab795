"""Settling a collection step's children and choosing their next outside call (pure).

:func:`settle_step` applies Run ends to the children, cancels the waiting ones
when the collection halts, and ends the step once every child ended.
:func:`candidates` lists what the step could do now: cancellations of launched
children while it halts, launches (re-sent while launching; new ones while
fewer than the collection's ``max_active`` are active and it does not halt),
and safety re-reads of launched children (the RunCompleted event is the signal).
``schedule.plan`` orders them with the other steps' calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from pipeline_coordination.domain import collection as c
from pipeline_coordination.domain.collection_answers import halting
from pipeline_coordination.domain.pipeline import (
    CANCELLED,
    DESIRED_RUN,
    LAUNCHED,
    PINNED,
    RUNNING,
    STEP_FAILED,
    STEP_SUCCEEDED,
    WAITING,
    Effect,
    Pipeline,
    Step,
    Timing,
)

_STEP_OF = {c.SUCCEEDED: STEP_SUCCEEDED, c.FAILED: STEP_FAILED, c.CANCELLED: CANCELLED}


def settle_step(p: Pipeline, s: Step, now: datetime) -> Step:
    """The collection step with its facts applied (see the module doc); idempotent."""
    if s.carried_from:
        return s
    if s.cancelled_by and s.state in (WAITING, PINNED):
        return replace(s, state=CANCELLED, reason_code=c.R_COLLECTION_CANCELLED,
                       message=f"cancelled by {s.cancelled_by} before it started", ended_at=now)
    if s.state != LAUNCHED:
        return s
    items = s.items
    for _ in range(2):  # a child that just failed may make the collection halt (failFast)
        code, message = halting(p, replace(s, items=items))
        items = c.settle_items(items, code, message, now)
    s = replace(s, items=items)
    if not all(i.ended for i in items):
        return s
    state, reason, summary = c.outcome(items, s.array_decision)
    # A stop of the Pipeline is the Pipeline's own cancel: it does not fail it.
    stopped = state == c.CANCELLED and p.desired_state != DESIRED_RUN and not s.cancelled_by
    if stopped:
        reason = c.R_STOPPED
    return replace(s, state=_STEP_OF[state], reason_code=s.reason_code or reason, message=summary,
                   cancel_requested=s.cancel_requested or stopped, ended_at=now)


@dataclass
class Candidates:
    """A collection step's possible calls now, each kind in child order."""

    cancels: list[Effect] = field(default_factory=list)
    launches: list[Effect] = field(default_factory=list)
    observes: list[tuple[float, Effect]] = field(default_factory=list)  # (seconds until due, effect)


def _due(last: datetime | None, every: float, now: datetime) -> float:
    if last is None:
        return 0.0
    return max(0.0, (last + timedelta(seconds=every) - now).total_seconds())


def candidates(p: Pipeline, s: Step, now: datetime, timing: Timing) -> Candidates:
    """What the settled collection step ``s`` could do now (see the module doc)."""
    out = Candidates()
    if s.state != LAUNCHED or s.carried_from:
        return out
    halt = bool(halting(p, s)[0])
    active = sum(1 for i in s.items if i.state in c.ITEM_ACTIVE)
    room = s.collection.max_active - active if s.collection else 0
    if c.launches_as_array(s.collection, s.environment):
        room = len(s.items)  # one array: its %maxActive throttles, not the launches
    for i in s.items:
        if halt and i.run_id and i.awaiting_end and not i.cancel_requested:
            out.cancels.append(Effect("cancel-item", s.index, i.index))
        elif i.state == c.LAUNCHING:
            out.launches.append(Effect("launch-item", s.index, i.index))
        elif i.state == c.WAITING and not halt and p.state == RUNNING and room > 0:
            out.launches.append(Effect("launch-item", s.index, i.index))
            room -= 1
        elif i.run_id and i.awaiting_end:
            wait = _due(i.observed_at or i.started_at, timing.batch_recheck, now)
            out.observes.append((wait, Effect("observe-item", s.index, i.index)))
    return out


_COLLECTION_ENDS = frozenset({STEP_SUCCEEDED, STEP_FAILED, CANCELLED})


def just_ended(old: Pipeline, new: Pipeline) -> list[Step]:
    """Collection steps of ``new`` that ended since ``old`` (the CollectionCompleted moments)."""
    before = {s.index: s.state for s in old.steps}
    return [
        s for s in new.steps
        if s.collection_id and not s.carried_from and s.state in _COLLECTION_ENDS
        and before.get(s.index) not in _COLLECTION_ENDS
    ]
