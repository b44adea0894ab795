"""Rerunning an ended Pipeline: a new Pipeline over the same immutable graph.

``rerun --failed`` keeps every step that succeeded (a ready service too): its
result, Run and output commit are carried over (``carried_from``) and it is
never launched again. Every other step (failed, cancelled or skipped) waits again and
runs under the graph's rules; each is pinned when it starts to the commit its
branch names then, so it reads what the kept steps pushed. A collection step
that ran and did not succeed runs again with only the children that did not
succeed; its succeeded children are carried over (``collection_rerun.py``).
Without ``--failed`` every step and every child runs again. The original
Pipeline is never changed.
"""

from __future__ import annotations

from dataclasses import replace

from pipeline_coordination.domain import collection_rerun, graph
from pipeline_coordination.domain.answers import with_collection_ids
from pipeline_coordination.domain.pipeline import (
    PIPELINE_TERMINAL,
    RUNNING,
    Pipeline,
    Step,
)


class RerunRefused(ValueError):
    """The Pipeline cannot be rerun now: ``code`` is ``pipeline-not-ended`` or ``nothing-to-rerun``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def _fresh(s: Step) -> Step:
    """The step as it was saved before it ever ran: its action, revision and graph only."""
    return Step(
        index=s.index,
        action=s.action,
        workload_id=s.workload_id,
        prepared_revision=s.prepared_revision,
        family=s.family,
        environment=s.environment,
        service_kind=s.service_kind,
        needs=s.needs,
        when=s.when,
        collection=s.collection,
    )


def rerun(original: Pipeline, *, pipeline_id: str, member: str, failed_only: bool, max_active: int = 0) -> Pipeline:
    """The new Pipeline (state ``running``) rerunning ``original``'s graph.

    Raises :class:`RerunRefused` ``pipeline-not-ended`` while the original is not
    succeeded, failed or stopped, and ``nothing-to-rerun`` when ``failed_only``
    finds no failed, cancelled or skipped step. ``max_active``: 0 keeps the
    original's (ValueError outside 1..50).
    """
    if original.state not in PIPELINE_TERMINAL:
        raise RerunRefused("pipeline-not-ended", f"Pipeline {original.pipeline_id} is {original.state}; "
                           "rerun it once it has ended (or stop it first)")
    if not original.steps:
        raise RerunRefused("nothing-to-rerun", f"Pipeline {original.pipeline_id} never had steps "
                           f"({original.reason_code or original.state}); start a new Pipeline instead")
    steps = []
    for s in original.steps:
        if failed_only and s.done:
            steps.append(replace(s, carried_from=s.carried_from or original.pipeline_id))
        elif failed_only and s.is_collection and s.items:
            steps.append(replace(_fresh(s), items=collection_rerun.rerun_children(s.items, original.pipeline_id)))
        else:
            steps.append(_fresh(s))
    if failed_only and all(s.carried_from for s in steps):
        raise RerunRefused("nothing-to-rerun", f"Pipeline {original.pipeline_id} has no failed, cancelled or "
                           "skipped step")
    graph.check_dag([s.needs for s in steps])
    return Pipeline(
        pipeline_id=pipeline_id,
        project=original.project,
        initiating_member=member,
        repository_url=original.repository_url,
        branch=original.branch,
        requested_actions=original.requested_actions,
        state=RUNNING,
        prepared_commit=original.prepared_commit,
        steps=with_collection_ids(pipeline_id, steps),
        max_active=graph.bounded_max_active(max_active) if max_active else original.max_active,
        rerun_of=original.pipeline_id,
    )


def rerun_steps(p: Pipeline) -> list[int]:
    """Indices of the steps of a rerun Pipeline that run again (not carried over)."""
    return [s.index for s in p.steps if not s.carried_from]
