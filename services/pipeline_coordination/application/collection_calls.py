"""The outside calls about a collection's children (``launch-item``, ``observe-item``, ``cancel-item``).

The coordinator makes them as it makes a step's own calls: a child's launch
intent is saved first (the fence of a stop, a cancel and a fail-fast), the call
is made outside any transaction with a stable command_id and the child's own
launch key, and the answer is returned as a pure change to apply.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pipeline_coordination.application.faults import FaultHook
from pipeline_coordination.application.ports import ArrayGroup, LaunchRequest, Refused, Runs
from pipeline_coordination.domain import collection as c
from pipeline_coordination.domain import collection_answers as ca
from pipeline_coordination.domain import identities
from pipeline_coordination.domain import pipeline as d

log = logging.getLogger(__name__)

Change = Callable[[d.Pipeline, Any], d.Pipeline]
Apply = Callable[[Change], Awaitable[d.Pipeline]]


def child_labels(p: d.Pipeline, s: d.Step, k: int) -> dict[str, str]:
    """The labels of child ``k``'s Run: its step's, plus the collection id and the child's index."""
    return identities.labels(p.pipeline_id, s.index, s.action) | {
        "collection_id": s.collection_id, "collection_item": str(k),
    }


def child_request(p: d.Pipeline, s: d.Step, item: c.Item) -> LaunchRequest:
    """Child ``item``'s LaunchRun: the step's revision and pinned commit, with the child's values."""
    pid = p.pipeline_id
    return LaunchRequest(
        command_id=identities.command_id(pid, f"launch-item:{item.index}", s.index, s.launch_attempt, p.request_round),
        project=p.project,
        member=p.initiating_member,
        workload_id=s.workload_id,
        revision=s.revision,
        launch_key=identities.item_key(pid, s.index, s.launch_attempt, item.index),
        labels=child_labels(p, s, item.index),
        repository_commit=s.pinned_commit,
        parameters=dict(item.parameters),
        array_group=child_array_group(s, item),
    )


def child_array_group(s: d.Step, item: c.Item) -> ArrayGroup | None:
    """Child ``item``'s array group when its collection launches as one array (index from 0)."""
    shape = s.collection
    if shape is None or not c.launches_as_array(shape, s.environment):
        return None
    index, size = c.array_position(s.items, item)
    return ArrayGroup(group_id=c.array_group_id(s.collection_id, s.launch_attempt), size=size,
                      index=index, max_active=min(shape.max_active, size), mode=shape.array)


async def perform(runs: Runs, fault: FaultHook, apply: Apply, p: d.Pipeline, effect: d.Effect) -> Change:
    """Make a child's call; return the change that applies its answer (Unavailable propagates)."""
    index, k = effect.step, effect.item
    step = p.step(index)
    item = step.items[k - 1]
    if effect.kind == "launch-item":
        if item.state == c.WAITING:
            p = await apply(lambda p, now: ca.launch_item_intent(p, index, k))
            step, item = p.step(index), p.step(index).items[k - 1]
            if item.state != c.LAUNCHING:
                return lambda p, now: p  # a stop, a cancel or a fail-fast came first: fenced
            await fault("item-launch-intent")
        request = child_request(p, step, item)
        try:
            run_id = await runs.launch(request)
        except Refused as e:
            await fault("item-launched")
            return lambda p, now, code=e.code, m=e.message: ca.on_item_refused(p, index, k, code, m, now)
        await fault("item-launched")
        return lambda p, now: ca.on_item_launched(p, index, k, run_id, now, request.command_id)
    if effect.kind == "observe-item":
        try:
            view = await runs.get(p.project, p.initiating_member, item.run_id)
        except Refused as e:
            log.warning("pipeline %s step %d child %d: GetRun refused (%s)", p.pipeline_id, index, k, e)
            view = d.RunView(run_id=item.run_id)
        return lambda p, now: ca.on_item_observed(p, index, k, view, now)
    if effect.kind == "cancel-item":
        member = p.stopped_by or step.cancelled_by or p.initiating_member
        halt, why = ca.halting(p, step)
        reason = f"the collection halted: {why}" if why else "the collection halted"
        cid = identities.command_id(p.pipeline_id, f"cancel-item:{k}", index, step.launch_attempt, p.request_round)
        try:
            ended, code = await runs.cancel(cid, p.project, member, item.run_id, reason[: d.MAX_REASON])
        except Refused as e:
            await fault("item-cancelled")
            return lambda p, now, code=e.code, m=e.message: ca.on_item_cancel_refused(p, index, k, code, m, now)
        await fault("item-cancelled")
        return lambda p, now: ca.on_item_cancel_recorded(p, index, k, ended, code, halt_code=halt)
    raise ValueError(f"unknown effect {effect.kind!r}")
