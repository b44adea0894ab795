"""A Pipeline and its steps: the pure rules of the coordinator (seed 004 §8A–§8C, §8E).

A Pipeline runs the actions of one repository branch one after another. Each
step is *pinned when it starts* to the commit its branch names at that moment,
so it reads what the step before it pushed (the hand-off). The coordinator
(application layer) loads a :class:`Pipeline`, asks :func:`settle` to apply the
facts it holds, asks :func:`plan` for the one outside call to make next, makes
it outside any transaction, and applies the answer with one of the ``on_*``
functions. Every function here is pure: values in, new values out.

States of a Pipeline: ``preparing`` → ``running`` → ``succeeded`` | ``failed``;
``stopping`` → ``stopped`` after an accepted stop. States of a step:
``waiting`` → ``pinned`` → ``launching`` → ``launched`` → (``ready`` for a
service) → ``succeeded`` | ``failed``; ``cancelling`` → ``cancelled`` when its Run
is stopped; ``skipped`` when it was never launched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from pipeline_coordination.domain import identities

# Pipeline states
PREPARING = "preparing"
RUNNING = "running"
STOPPING = "stopping"
SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"
PIPELINE_TERMINAL = frozenset({SUCCEEDED, FAILED, STOPPED})

DESIRED_RUN = "run"
DESIRED_STOP = "stop"

# Step states
WAITING = "waiting"
PINNED = "pinned"
LAUNCHING = "launching"
LAUNCHED = "launched"
READY = "ready"
STEP_SUCCEEDED = "succeeded"
STEP_FAILED = "failed"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
SKIPPED = "skipped"

BATCH = "queued-batch"
SERVICE = "reconciled-service"

# Run outcomes (Execution Core's RunCompleted.outcome). A lost or timed-out Run is
# a failed step: its work did not produce what the next step reads.
OUTCOMES = frozenset({"succeeded", "failed", "cancelled", "lost", "timed-out"})
STEP_OF_OUTCOME = {"succeeded": STEP_SUCCEEDED, "failed": STEP_FAILED, "cancelled": CANCELLED,
                   "lost": STEP_FAILED, "timed-out": STEP_FAILED}

# Reason codes of a Pipeline (docs/pipelines.md)
R_RUN_FAILED = "run-failed"
R_RUN_CANCELLED = "run-cancelled"
R_STOPPED = "stopped-by-member"
R_SERVICE_NOT_READY = "service-not-ready"
R_ACTION_NOT_IN_BRANCH = "action-not-found"

MAX_ACTIONS = 200
MAX_URL = 2000
MAX_BRANCH = 255
MAX_REASON = 500
# A refusal's message may list every problem of actions.yaml (file:line each): keep
# all of them for `metallo pipeline show`, still bounded.
MAX_MESSAGE = 8000
_ACTION = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$")
_BRANCH_BAD = re.compile(r"(\.\.|[\x00-\x20~^:?*\[\\]|@\{|//|^/|/$|\.lock$|^-|\.$)")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Timing:
    """Coordinator timing in seconds (application/settings.py reads it)."""

    service_poll: float = 5.0  # between two readiness checks of a launched service
    batch_recheck: float = 60.0  # safety re-read of a batch Run whose completion is awaited
    service_ready_timeout: float = 1800.0  # launched service not healthy by then → step fails
    retry_base: float = 1.0  # first wait after a temporary failure (doubles)
    retry_max: float = 60.0  # longest wait after temporary failures


@dataclass(frozen=True)
class Step:
    """One step: an action of the branch and, once launched, its Run."""

    index: int
    action: str
    workload_id: str
    prepared_revision: int
    family: str
    environment: str
    service_kind: str = ""
    state: str = WAITING
    revision: int = 0
    pinned_commit: str = ""
    run_id: str = ""
    launch_attempt: int = 1
    launch_command_id: str = ""
    run_outcome: str = ""
    reason_code: str = ""
    message: str = ""
    output_commit: str = ""
    endpoint: str = ""
    cancel_requested: bool = False
    cancel_refused: bool = False
    started_at: datetime | None = None
    ended_at: datetime | None = None
    observed_at: datetime | None = None

    @property
    def is_service(self) -> bool:
        """Whether the step's family is ``reconciled-service`` (a service, not a batch Run)."""
        return self.family == SERVICE

    @property
    def done(self) -> bool:
        """The Pipeline may move past this step: a batch Run succeeded, a service is ready."""
        return self.state == STEP_SUCCEEDED or (self.is_service and self.state == READY)

    @property
    def awaiting_end(self) -> bool:
        """A Run was (or may have been) launched and its end is not known yet."""
        launched = bool(self.run_id) or self.state == LAUNCHING
        return launched and not self.run_outcome and not self.cancel_refused

    def launch_key(self, pipeline_id: str) -> str:
        """Execution Core's launch key of this step's current launch attempt (seed 004 §8B)."""
        return identities.launch_key(pipeline_id, self.index, self.launch_attempt)


@dataclass(frozen=True)
class Pipeline:
    """A Pipeline with its steps in run order (steps are empty while preparing)."""

    pipeline_id: str
    project: str
    initiating_member: str
    repository_url: str
    branch: str
    requested_actions: tuple[str, ...] = ()
    state: str = PREPARING
    desired_state: str = DESIRED_RUN
    prepared_commit: str = ""
    failed_step: int = 0
    reason_code: str = ""
    message: str = ""
    steps: tuple[Step, ...] = ()
    stopped_by: str = ""
    stop_reason: str = ""
    ended_at: datetime | None = None
    retries: int = 0
    last_error: str = ""
    request_round: int = 0

    def step(self, index: int) -> Step:
        """The step with this 1-based index; raises KeyError when there is none."""
        for s in self.steps:
            if s.index == index:
                return s
        raise KeyError(f"pipeline {self.pipeline_id} has no step {index}")

    def with_step(self, new: Step) -> Pipeline:
        """A copy with the step of the same index replaced by ``new``."""
        return replace(self, steps=tuple(new if s.index == new.index else s for s in self.steps))

    @property
    def current(self) -> Step | None:
        """The first step not yet done (None when every step is done)."""
        return next((s for s in self.steps if not s.done), None)

    @property
    def needs_work(self) -> bool:
        """Whether the coordinator still has something to do or to wait for."""
        if self.state not in PIPELINE_TERMINAL:
            return True
        return any(_needs_cancel(self, s) for s in self.steps)


@dataclass(frozen=True)
class PreparedAction:
    """One action as Workload Portfolio prepared it (PrepareBranch/PrepareAction reply)."""

    action: str
    workload_id: str
    revision: int
    commit: str
    family: str
    environment: str
    service_kind: str = ""


@dataclass(frozen=True)
class RunView:
    """What Execution Core's GetRun says about a step's Run, reduced to what the coordinator needs.

    ``ready``: a service is healthy and has an endpoint. ``outcome``: set once the
    Run ended.
    """

    run_id: str
    outcome: str = ""
    reason_code: str = ""
    output_commit: str = ""
    ready: bool = False
    endpoint: str = ""


@dataclass(frozen=True)
class Effect:
    """The one outside call the coordinator makes next.

    kind: ``prepare-branch`` | ``pin`` | ``launch`` | ``observe`` | ``cancel`` |
    ``service-timeout`` (no call: the step's readiness deadline passed).
    """

    kind: str
    step: int = 0


@dataclass(frozen=True)
class Plan:
    """:func:`plan`'s answer: the effect due now, or when to look again (seconds, None = only on a wake)."""

    effect: Effect | None
    wake_in: float | None = None


@dataclass(frozen=True)
class Settled:
    """:func:`settle`'s answer: the new Pipeline and whether it just completed."""

    pipeline: Pipeline
    completed: bool = False
    changed: bool = False


class InvalidStart(ValueError):
    """A StartPipeline input that can never be accepted; ``problems`` lists each."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


class StepSelectionError(ValueError):
    """The prepared branch does not hold the requested actions (code ``action-not-found``)."""

    code = R_ACTION_NOT_IN_BRANCH


# ---------------------------------------------------------------- start


def validate_start(repository_url: str, branch: str, actions: list[str]) -> None:
    """Check StartPipeline's inputs (seed 004 §8E). Raises :class:`InvalidStart` with every problem."""
    problems: list[str] = []
    if not repository_url.strip():
        problems.append("repository_url is required")
    elif len(repository_url) > MAX_URL:
        problems.append(f"repository_url is longer than {MAX_URL} characters")
    elif any(c in repository_url for c in "\x00\n\r"):
        problems.append("repository_url holds a control character")
    if not branch:
        problems.append("branch is required")
    elif len(branch) > MAX_BRANCH or _BRANCH_BAD.search(branch):
        problems.append(f"branch {branch[:80]!r} is not a valid branch name")
    if len(actions) > MAX_ACTIONS:
        problems.append(f"at most {MAX_ACTIONS} actions")
    seen: set[str] = set()
    for a in actions[:MAX_ACTIONS]:
        if not _ACTION.match(a):
            problems.append(f"action {a[:80]!r} is not a valid action name")
        elif a in seen:
            problems.append(f"action {a!r} is listed twice")
        seen.add(a)
    if problems:
        raise InvalidStart(problems)


def steps_from_prepared(prepared: list[PreparedAction], requested: tuple[str, ...]) -> tuple[Step, ...]:
    """The steps of a Pipeline from PrepareBranch's reply (actions.yaml order).

    With ``requested`` empty every action becomes a step in file order ("Run all
    in order"); otherwise the requested actions, in the requested order. Raises
    :class:`StepSelectionError` when a requested action is not in the branch or
    the branch has no action.
    """
    by_name = {p.action: p for p in prepared}
    if requested:
        missing = [a for a in requested if a not in by_name]
        if missing:
            # Name what is there, as `metallo action run` does (a new user's report).
            raise StepSelectionError(
                f"not in the branch's actions.yaml: {', '.join(missing)} "
                f"(actions: {', '.join(sorted(by_name)) or 'none'})"
            )
        chosen = [by_name[a] for a in requested]
    else:
        chosen = list(prepared)
    if not chosen:
        raise StepSelectionError("the branch's actions.yaml has no action")
    return tuple(
        Step(
            index=i,
            action=p.action,
            workload_id=p.workload_id,
            prepared_revision=p.revision,
            family=p.family,
            environment=p.environment,
            service_kind=p.service_kind,
        )
        for i, p in enumerate(chosen, start=1)
    )


# ---------------------------------------------------------------- facts and outcomes


def _fail(p: Pipeline, step: Step, code: str, message: str, now: datetime) -> Pipeline:
    """End a running Pipeline as failed at ``step``; steps never launched are skipped."""
    steps = tuple(
        replace(s, state=SKIPPED, ended_at=now) if s.state in (WAITING, PINNED) else s for s in p.steps
    )
    return replace(
        p,
        steps=steps,
        state=FAILED,
        failed_step=step.index,
        reason_code=code,
        message=message[:MAX_REASON],
        ended_at=now,
    )


def _needs_cancel(p: Pipeline, s: Step) -> bool:
    """A live Run the Pipeline must cancel: it is stopping/stopped, or it failed."""
    ending = p.desired_state == DESIRED_STOP or p.state == FAILED
    return ending and bool(s.run_id) and s.awaiting_end and not s.cancel_requested


def settle(p: Pipeline, now: datetime) -> Settled:
    """Apply the facts the Pipeline holds: Run ends, a stop, the last step done.

    Returns the new Pipeline; ``completed`` is True when it just reached
    ``succeeded``, ``failed`` or ``stopped`` (the PipelineCompleted moment).
    Idempotent: settling a settled Pipeline changes nothing.
    """
    start = p
    # A Run's end decides its step, whatever the Pipeline does.
    steps = []
    for s in p.steps:
        if s.run_outcome and s.state in (LAUNCHING, LAUNCHED, READY, CANCELLING):
            state = STEP_OF_OUTCOME[s.run_outcome]
            s = replace(s, state=state, ended_at=s.ended_at or now)
        steps.append(s)
    p = replace(p, steps=tuple(steps))

    if p.state == PREPARING and p.desired_state == DESIRED_STOP:
        p = replace(p, state=STOPPED, reason_code=R_STOPPED, ended_at=now)
    elif p.state == RUNNING and p.desired_state == DESIRED_STOP:
        p = replace(p, state=STOPPING, reason_code=R_STOPPED)
    if p.state == RUNNING:
        for s in p.steps:
            if s.state == STEP_FAILED:
                p = _fail(p, s, s.reason_code or R_RUN_FAILED, s.message or f"step {s.index} ({s.action}) failed", now)
                break
            if s.state == CANCELLED and not s.cancel_requested:
                p = _fail(p, s, R_RUN_CANCELLED, f"the Run of step {s.index} ({s.action}) was cancelled", now)
                break
        else:
            if p.steps and p.current is None:
                p = replace(p, state=SUCCEEDED, ended_at=now)
    if p.state == STOPPING:
        p = replace(
            p,
            steps=tuple(
                replace(s, state=SKIPPED, ended_at=now) if s.state in (WAITING, PINNED) else s for s in p.steps
            ),
        )
        if not any(s.awaiting_end for s in p.steps):
            p = replace(p, state=STOPPED, ended_at=now)
    completed = start.state not in PIPELINE_TERMINAL and p.state in PIPELINE_TERMINAL
    return Settled(pipeline=p, completed=completed, changed=p != start)


# ---------------------------------------------------------------- what to do next


def _due(last: datetime | None, every: float, now: datetime) -> float:
    """Seconds until ``every`` seconds after ``last`` (0 when due or never done)."""
    if last is None:
        return 0.0
    return max(0.0, (last + timedelta(seconds=every) - now).total_seconds())


def plan(p: Pipeline, now: datetime, timing: Timing) -> Plan:
    """The outside call due now for a settled Pipeline, or when to look again."""
    if p.state == PREPARING:
        return Plan(Effect("prepare-branch"))
    # Cancellation first: it stops work, so it never waits behind anything else.
    for s in p.steps:
        if _needs_cancel(p, s):
            return Plan(Effect("cancel", s.index))
    if p.state == STOPPING:
        for s in p.steps:
            if s.state == LAUNCHING and s.awaiting_end:
                # The launch may have been made: re-send it (same command_id) to learn its Run.
                return Plan(Effect("launch", s.index))
        waits = [_due(s.observed_at, timing.batch_recheck, now) for s in p.steps if s.run_id and s.awaiting_end]
        wait = min(waits) if waits else None
        if wait == 0.0:
            s = next(s for s in p.steps if s.run_id and s.awaiting_end and _due(s.observed_at, timing.batch_recheck, now) == 0.0)
            return Plan(Effect("observe", s.index))
        return Plan(None, wait)
    if p.state != RUNNING:
        return Plan(None, None)
    s = p.current
    if s is None:
        return Plan(None, None)
    if s.state == WAITING:
        return Plan(Effect("pin", s.index))
    if s.state in (PINNED, LAUNCHING):
        return Plan(Effect("launch", s.index))
    if s.state == LAUNCHED and s.is_service:
        if s.started_at is not None and now - s.started_at >= timedelta(seconds=timing.service_ready_timeout):
            return Plan(Effect("service-timeout", s.index))
        wait = _due(s.observed_at, timing.service_poll, now)
        return Plan(Effect("observe", s.index)) if wait == 0.0 else Plan(None, wait)
    if s.state == LAUNCHED:
        # The RunCompleted event is the signal; the re-read only guards against a lost one.
        wait = _due(s.observed_at or s.started_at, timing.batch_recheck, now)
        return Plan(Effect("observe", s.index)) if wait == 0.0 else Plan(None, wait)
    return Plan(None, None)


def retry_delay(p: Pipeline, timing: Timing) -> float:
    """Seconds to wait after ``p.retries`` temporary failures in a row (doubling, capped)."""
    return min(timing.retry_max, timing.retry_base * (2 ** max(0, p.retries - 1)))


# ---------------------------------------------------------------- answers of the outside calls


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
    """PrepareBranch answered: save the steps and start running (ignored unless preparing)."""
    if p.state != PREPARING:
        return p
    p = _ok(p)
    try:
        steps = steps_from_prepared(prepared, p.requested_actions)
    except StepSelectionError as e:
        return replace(p, state=FAILED, prepared_commit=commit, reason_code=e.code, message=str(e)[:MAX_MESSAGE], ended_at=now)
    return replace(p, state=RUNNING, prepared_commit=commit, steps=steps)


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


@dataclass(frozen=True)
class StepIdentity:
    """Which step a Run belongs to, read from its labels or launch key."""

    pipeline_id: str
    step: int
    attempt: int = 1


def step_of_run(labels: dict[str, str], launch_key: str) -> StepIdentity | None:
    """The Pipeline step a Run event is about, or None for a Run no Pipeline launched."""
    parsed = identities.parse_launch_key(launch_key) if launch_key else None
    if parsed is not None:
        return StepIdentity(*parsed)
    pid, step = labels.get("pipeline_id"), labels.get("pipeline_step")
    if pid and step and step.isdigit():
        return StepIdentity(pid, int(step))
    return None

