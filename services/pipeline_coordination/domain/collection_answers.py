"""The answers of the outside calls about a collection's children, applied to a Pipeline (pure).

As ``answers.py`` for a step's own Run, one function per answer: the child's
launch intent, LaunchRun's reply or refusal, a RunCompleted or GetRun, a
CancelRun's reply, and a member's CancelCollection. The first end of a child's
Run wins; repeats and strangers change nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from metallo.parameters import ParameterError
from pipeline_coordination.domain import collection as c
from pipeline_coordination.domain import collection_rerun
from pipeline_coordination.domain.pipeline import (
    DESIRED_RUN,
    LAUNCHED,
    MAX_REASON,
    OUTCOMES,
    PINNED,
    RUNNING,
    STEP_FAILED,
    WAITING,
    Pipeline,
    PreparedAction,
    RunView,
    Step,
)


def _with_item(p: Pipeline, s: Step, item: c.Item) -> Pipeline:
    return p.with_step(replace(s, items=tuple(item if i.index == item.index else i for i in s.items)))


def _item(s: Step, k: int) -> c.Item:
    if 0 < k <= len(s.items) and s.items[k - 1].index == k:
        return s.items[k - 1]
    raise KeyError(f"step {s.index} has no child {k}")


def start_collection(p: Pipeline, s: Step, prepared: PreparedAction, now: datetime) -> Pipeline:
    """The collection step was pinned: create every child at once (all or none) and start driving them.

    A shape that breaks a rule fails the step (``collection-invalid``); ``array:
    require`` where no array can be made fails it too (``array-unavailable``).
    A rerun's step keeps the children it was recorded with (carried and fresh).
    """
    pinned = replace(s, workload_id=prepared.workload_id, revision=prepared.revision,
                     pinned_commit=prepared.commit, family=prepared.family,
                     environment=prepared.environment, service_kind=prepared.service_kind, started_at=now)
    assert s.collection is not None
    try:
        items = collection_rerun.keep_children(c.items_of(s.collection), s.items)
    except ParameterError as e:
        return p.with_step(replace(pinned, state=STEP_FAILED, reason_code=c.R_COLLECTION_INVALID,
                                   message=str(e)[:MAX_REASON], ended_at=now))
    decision, refusal = c.array_decision(s.collection, prepared.environment)
    if refusal:
        return p.with_step(replace(pinned, state=STEP_FAILED, reason_code=refusal, message=decision[:MAX_REASON],
                                   array_decision=decision, ended_at=now))
    return p.with_step(replace(pinned, state=LAUNCHED, items=items, array_decision=decision))


def halting(p: Pipeline, s: Step) -> tuple[str, str]:
    """(code, message) why the step's waiting children are no longer launched, or ("", "")."""
    return c.halting_reason(s.items, bool(s.collection and s.collection.fail_fast),
                            p.desired_state != DESIRED_RUN, s.cancelled_by)


def launch_item_intent(p: Pipeline, index: int, k: int) -> Pipeline:
    """Record that child ``k``'s launch is about to be sent (the fence of a stop, a cancel, a fail-fast)."""
    s = p.step(index)
    item = _item(s, k)
    if p.state != RUNNING or s.state != LAUNCHED or item.state != c.WAITING or halting(p, s)[0]:
        return p
    return _with_item(p, s, replace(item, state=c.LAUNCHING))


def on_item_launched(p: Pipeline, index: int, k: int, run_id: str, now: datetime, command_id: str) -> Pipeline:
    """Execution Core accepted child ``k``'s launch (or replayed it): the child follows its Run."""
    s = p.step(index)
    item = _item(s, k)
    if item.run_id and item.run_id != run_id:
        raise ValueError(f"step {index} child {k} already follows Run {item.run_id}, not {run_id}")
    state = c.LAUNCHED if item.state == c.LAUNCHING else item.state
    return _with_item(p, s, replace(item, state=state, run_id=run_id, observed_at=now, started_at=item.started_at or now,
                                    launch_command_id=item.launch_command_id or command_id))


def on_item_refused(p: Pipeline, index: int, k: int, code: str, message: str, now: datetime) -> Pipeline:
    """LaunchRun refused child ``k`` for good: the child fails (a stop makes it cancelled: nothing ran)."""
    s = p.step(index)
    item = _item(s, k)
    if item.state not in (c.WAITING, c.LAUNCHING):
        return p
    state = c.CANCELLED if p.desired_state != DESIRED_RUN else c.FAILED
    return _with_item(p, s, replace(item, state=state, reason_code=code, message=message[:MAX_REASON], ended_at=now))


def on_item_completed(p: Pipeline, index: int, k: int, run_id: str, outcome: str, reason_code: str,
                      output_commit: str, array_start: str = "") -> Pipeline:
    """A RunCompleted fact for child ``k``'s Run; also records the Run id when the launch reply was lost,
    and how Execution Core started it when an array fell back (the step's array decision)."""
    s = p.step(index)
    try:
        item = _item(s, k)
    except KeyError:
        return p
    if outcome not in OUTCOMES or item.run_outcome or (item.run_id and item.run_id != run_id):
        return p
    if item.state == c.WAITING:
        return p  # a launch this child never recorded intent for cannot be its Run
    s = replace(s, array_decision=c.with_array_start(s.array_decision, array_start))
    return _with_item(p, s, replace(item, run_id=run_id, run_outcome=outcome,
                                    reason_code=item.reason_code or reason_code, output_commit=output_commit))


def on_item_observed(p: Pipeline, index: int, k: int, view: RunView, now: datetime) -> Pipeline:
    """GetRun answered for child ``k``'s Run: an end is a fact."""
    s = p.step(index)
    item = _item(s, k)
    if item.run_id != view.run_id:
        return p
    p = _with_item(p, s, replace(item, observed_at=now))
    if view.outcome:
        return on_item_completed(p, index, k, view.run_id, view.outcome, view.reason_code, view.output_commit,
                                 view.array_start)
    return p


def on_item_cancel_recorded(p: Pipeline, index: int, k: int, ended: str = "", reason_code: str = "",
                            halt_code: str = "") -> Pipeline:
    """CancelRun accepted for child ``k`` (or its Run had already ended: ``ended`` is its outcome, kept).

    ``halt_code`` (``fail-fast``, ``collection-cancelled``, ``stopped-by-member``) is why the
    collection cancelled it; it becomes the child's reason unless its Run had already ended."""
    s = p.step(index)
    item = _item(s, k)
    item = replace(item, cancel_requested=True, state=c.CANCELLING if item.state == c.LAUNCHED else item.state,
                   reason_code=item.reason_code or ("" if ended else halt_code))
    p = _with_item(p, s, item)
    if ended:
        p = on_item_completed(p, index, k, item.run_id, ended, reason_code, "")
    return p


def on_item_cancel_refused(p: Pipeline, index: int, k: int, code: str, message: str, now: datetime) -> Pipeline:
    """CancelRun refused child ``k`` for good: its Run may go on; the child ends uncertain, saying why."""
    s = p.step(index)
    item = _item(s, k)
    return _with_item(p, s, replace(item, cancel_requested=True, cancel_refused=True, state=c.UNCERTAIN,
                                    message=f"cancel refused: {code}: {message}"[:MAX_REASON], ended_at=now))


def request_cancel(p: Pipeline, index: int, member: str, reason: str) -> tuple[Pipeline, bool]:
    """Record an accepted CancelCollection; returns (Pipeline, recorded).

    Only the first is recorded, and only while the step has not ended: a step
    not started yet is then never started; its children not launched never are.
    """
    s = p.step(index)
    if s.cancelled_by or s.state not in (WAITING, PINNED, LAUNCHED):
        return p, False
    return p.with_step(replace(s, cancelled_by=member, cancel_reason=reason[:MAX_REASON])), True
