"""Which children of a collection step run again under ``rerun --failed`` (pure).

A child that **succeeded** is *carried over*: the rerun's collection keeps its
Run, outcome, output commit and times (``carried_from`` names the Pipeline whose
Run it is) and never launches, observes or cancels it. **Every other child runs
again** as a fresh child of the new collection, with the same index and values:
``failed``, ``uncertain`` (its Run was lost, or its cancel refused: its result
was never confirmed) and ``cancelled`` — its Run was cancelled, or it was never
launched because the collection halted (failFast, a cancel, a stop).

The rerun's collection holds every child from the moment the rerun is
recorded: the carried ones ended, the others waiting. When the step starts it
is pinned afresh, like any step of a rerun (the commit its branch names then),
and the waiting children run at that commit under the collection's
``maxActive`` and ``failFast``; a carried child keeps the commit and revision
its own Run had. A rerun collection step that ends without launching its
children (skipped, cancelled or stopped first, or refused when it starts) ends
its waiting children ``cancelled`` with the step's reason, so no child is left
waiting under an ended step.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from metallo.parameters import ParameterError
from pipeline_coordination.domain import collection as c
from pipeline_coordination.domain.pipeline import CANCELLED, SKIPPED, STEP_FAILED

MAX_REASON = c.MAX_REASON
_STEP_ENDED = frozenset({SKIPPED, CANCELLED, STEP_FAILED})


def carried(i: c.Item) -> bool:
    """Whether an ended collection's child is carried over by a rerun --failed (it succeeded)."""
    return i.state == c.SUCCEEDED


def rerun_children(items: tuple[c.Item, ...], pipeline_id: str) -> tuple[c.Item, ...]:
    """The children of the rerun's collection: succeeded ones carried over, every other one fresh (waiting).

    ``pipeline_id`` is the original Pipeline; a child it had itself carried keeps
    naming the Pipeline whose Run it is.
    """
    return tuple(
        replace(i, carried_from=i.carried_from or pipeline_id) if carried(i)
        else c.Item(index=i.index, parameters=dict(i.parameters))
        for i in items
    )


def keep_children(expanded: tuple[c.Item, ...], existing: tuple[c.Item, ...]) -> tuple[c.Item, ...]:
    """The children a collection step starts with: ``existing`` when a rerun recorded them, else ``expanded``.

    Raises ParameterError when the recorded children are not the expansion of the
    step's shape (the same indices and values), which never happens for a shape
    that is saved once and expanded by the same rule.
    """
    if not existing:
        return expanded
    if [(i.index, i.parameters) for i in existing] != [(i.index, i.parameters) for i in expanded]:
        raise ParameterError(["the rerun's children are not the expansion of the collection's matrix or parameters"])
    return existing


def rerun_indices(items: tuple[c.Item, ...]) -> list[int]:
    """Indices of the children that run again (not carried over)."""
    return [i.index for i in items if not i.carried_from]


def close_unstarted(items: tuple[c.Item, ...], step_state: str, reason_code: str,
                    now: datetime) -> tuple[c.Item, ...]:
    """The children of a step that ended (skipped, cancelled, failed) before launching them: waiting ones end cancelled."""
    if step_state not in _STEP_ENDED or not any(i.state == c.WAITING for i in items):
        return items
    why = f"never launched: the step was {step_state}" + (f" ({reason_code})" if reason_code else "")
    return tuple(
        replace(i, state=c.CANCELLED, reason_code=reason_code or step_state, message=why[:MAX_REASON], ended_at=now)
        if i.state == c.WAITING else i
        for i in items
    )
