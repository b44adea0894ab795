"""The answers of the coordinator's outside calls, applied to a Pipeline (pure).

Each ``on_*`` function takes the Pipeline as loaded under its row lock and an
owner's answer (Workload Portfolio's PrepareBranch / PrepareAction, Execution
Core's LaunchRun / GetRun / CancelRun, a RunCompleted event) and returns the new
Pipeline; ``schedule.settle`` then decides what follows. Values in, values out.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from pipeline_coordination.domain import collection_answers, graph, identities
from pipeline_coordination.domain.pipeline import (
    _COMMIT,
    CANCELLING,
    DESIRED_RUN,
    DESIRED_STOP,
    FAILED,
    LAUNCHED,
    LAUNCHING,
    MAX_MESSAGE,
    MAX_REASON,
    OUTCOMES,
    PINNED,
    PIPELINE_TERMINAL,
    PREPARING,
    R_SERVICE_NOT_READY,
    READY,
    RUNNING,
    SKIPPED,
    STEP_FAILED,
    STOPPING,
    WAITING,
    Pipeline,
    PreparedAction,
    RunView,
    StepSelectionError,
    Timing,
    steps_from_prepared,
)


def on_temporary_failure(p: Pipeline, message: str, *, renew_identity: bool = False) -> Pipeline:
    """An owner did not answer, or answered "try later": keep everything, count the retry.

    ``renew_identity``: the owner saved a temporary rejection under the request's
    command_id, so the next try must use the next request round.
    """
    return replace(
        p,
        retries=p.retries + 1,
        last_error=message[:MAX_REASON],
        request_round=p.request_round + (1 if renew_identity else 0),
    )


def _ok(p: Pipeline) -> Pipeline:
    return replace(p, retries=0, last_error="")


def on_branch_prepared(p: Pipeline, prepared: list[PreparedAction], commit: str, now: datetime) -> Pipeline:
    """PrepareBranch answered: the steps and their graph, saved with the Pipeline in one transaction.

    Ignored unless preparing; a graph that cannot be run fails the Pipeline before any step.
    """
    if p.state != PREPARING:
        return p
    p = _ok(p)
    try:
        steps = steps_from_prepared(prepared, p.requested_actions)
    except (StepSelectionError, graph.GraphError) as e:
        return replace(p, state=FAILED, prepared_commit=commit, reason_code=e.code, message=str(e)[:MAX_MESSAGE], ended_at=now)
    return replace(p, state=RUNNING, prepared_commit=commit, steps=with_collection_ids(p.pipeline_id, steps))


def with_collection_ids(pipeline_id: str, steps) -> tuple:
    """The steps with each collection step named by its stable collection id."""
    return tuple(
        replace(s, collection_id=identities.collection_id(pipeline_id, s.index)) if s.is_collection else s
        for s in steps
    )


def on_branch_refused(p: Pipeline, code: str, message: str, now: datetime) -> Pipeline:
    """PrepareBranch was refused for good (e.g. actions-invalid): the Pipeline fails before any step."""
    if p.state != PREPARING:
        return p
    return replace(_ok(p), state=FAILED, reason_code=code, message=message[:MAX_MESSAGE], ended_at=now)


def on_pinned(p: Pipeline, index: int, prepared: PreparedAction, now: datetime) -> Pipeline:
    """PrepareAction at the branch's current commit answered: pin the step to that commit.

    The revision may be newer than the prepared one when actions.yaml changed on
    the branch (seed 004 §8C); the family and environment follow the revision.
    Ignored unless the step is still waiting and the Pipeline running.
    """
    s = p.step(index)
    if p.state != RUNNING or s.state != WAITING:
        return p
    if not _COMMIT.match(prepared.commit):
        raise ValueError(f"pinned commit {prepared.commit!r} is not 40 lower-case hex")
    if s.is_collection:
        return collection_answers.start_collection(_ok(p), s, prepared, now)
    return _ok(p).with_step(
        replace(
            s,
            state=PINNED,
            workload_id=prepared.workload_id,
            revision=prepared.revision,
            pinned_commit=prepared.commit,
            family=prepared.family,
            environment=prepared.environment,
            service_kind=prepared.service_kind,
            started_at=now,
        )
    )


def on_step_refused(p: Pipeline, index: int, code: str, message: str, now: datetime) -> Pipeline:
    """A step's PrepareAction or LaunchRun was refused for good: the step fails (and with it the Pipeline)."""
    s = p.step(index)
    if s.state not in (WAITING, PINNED, LAUNCHING):
        return p
    if p.state == STOPPING:
        # The launch never took: nothing ran, nothing to cancel.
        return _ok(p).with_step(replace(s, state=SKIPPED, reason_code=code, message=message[:MAX_REASON], ended_at=now))
    return _ok(p).with_step(
        replace(s, state=STEP_FAILED, reason_code=code, message=message[:MAX_REASON], ended_at=now)
    )


def launch_intent(p: Pipeline, index: int) -> Pipeline:
    """Record that the step's launch is about to be sent (before the call; the stop fence)."""
    s = p.step(index)
    if p.state != RUNNING or p.desired_state != DESIRED_RUN or s.state != PINNED:
        return p
    return p.with_step(replace(s, state=LAUNCHING))


def on_launched(p: Pipeline, index: int, run_id: str, now: datetime, command_id: str = "") -> Pipeline:
    """Execution Core accepted the launch (or replayed it): the step follows its Run."""
    s = p.step(index)
    if s.run_id and s.run_id != run_id:
        raise ValueError(f"step {index} already follows Run {s.run_id}, not {run_id}")
    if s.state == LAUNCHING:
        s = replace(s, state=LAUNCHED)
    return _ok(p).with_step(
        replace(s, run_id=run_id, observed_at=now, launch_command_id=s.launch_command_id or command_id)
    )


def on_run_completed(p: Pipeline, index: int, run_id: str, outcome: str, reason_code: str, output_commit: str) -> Pipeline:
    """A RunCompleted fact for a step's Run. The first end wins; repeats and strangers change nothing.

    Arrives out of order too: before the launch reply was saved it also records
    the Run id. A Run id other than the step's is ignored.
    """
    s = p.step(index)
    if outcome not in OUTCOMES or s.run_outcome or (s.run_id and s.run_id != run_id):
        return p
    if s.state in (WAITING, PINNED):
        return p  # a launch this step never recorded intent for cannot be its Run
    return p.with_step(
        replace(
            s,
            run_id=run_id,
            run_outcome=outcome,
            reason_code=s.reason_code or reason_code,
            output_commit=output_commit,
        )
    )


def on_observed(p: Pipeline, index: int, view: RunView, now: datetime) -> Pipeline:
    """GetRun answered for a step's Run: an end is a fact; a healthy service with an endpoint is ready."""
    s = p.step(index)
    if s.run_id != view.run_id:
        return p
    p = _ok(p).with_step(replace(s, observed_at=now))
    if view.outcome:
        return on_run_completed(p, index, view.run_id, view.outcome, view.reason_code, view.output_commit)
    s = p.step(index)
    if s.is_service and view.ready and view.endpoint and s.state == LAUNCHED:
        return p.with_step(replace(s, state=READY, endpoint=view.endpoint))
    return p


def on_service_timeout(p: Pipeline, index: int, timing: Timing, now: datetime) -> Pipeline:
    """A launched service was not healthy within the readiness timeout: the step fails (its Run is then cancelled)."""
    s = p.step(index)
    if s.state != LAUNCHED or not s.is_service:
        return p
    return p.with_step(
        replace(
            s,
            state=STEP_FAILED,
            reason_code=R_SERVICE_NOT_READY,
            message=f"the service was not healthy with an endpoint within {timing.service_ready_timeout:.0f} s",
            ended_at=now,
        )
    )


def on_cancel_recorded(p: Pipeline, index: int, ended: str = "", reason_code: str = "") -> Pipeline:
    """CancelRun accepted (or the Run had already ended: ``ended`` is its outcome)."""
    s = p.step(index)
    s = replace(s, cancel_requested=True)
    if s.state in (LAUNCHED, READY):
        s = replace(s, state=CANCELLING)
    p = _ok(p).with_step(s)
    if ended:
        p = on_run_completed(p, index, s.run_id, ended, reason_code, "")
    return p


def on_cancel_refused(p: Pipeline, index: int, code: str, message: str) -> Pipeline:
    """CancelRun was refused for good: the Run may go on; the step says why and the stop completes."""
    s = p.step(index)
    return _ok(p).with_step(
        replace(s, cancel_requested=True, cancel_refused=True, message=f"cancel refused: {code}: {message}"[:MAX_REASON])
    )


def request_stop(p: Pipeline, member: str, reason: str) -> tuple[Pipeline, bool]:
    """Record an accepted StopPipeline. Returns (Pipeline, recorded); only the first stop is recorded.

    A finished Pipeline records the stop too when it still has ready services,
    which are then cancelled (seed 004 §8C "including ready services").
    """
    if p.desired_state == DESIRED_STOP:
        return p, False
    if p.state in PIPELINE_TERMINAL and not any(s.run_id and s.awaiting_end for s in p.steps):
        return p, False
    return replace(p, desired_state=DESIRED_STOP, stopped_by=member, stop_reason=reason[:MAX_REASON]), True
