"""A Pipeline and its steps: the values the coordinator works on (seed 004 §8A–§8C, §8E).

A Pipeline runs the actions of one repository branch as a dependency graph
(``graph.py``): a step starts once the steps it needs have ended as its ``when``
asks. Each step is *pinned when it starts* to the commit its branch names at
that moment, so it reads what its needs pushed (the hand-off). The coordinator
(application layer) loads a :class:`Pipeline`, asks ``schedule.settle`` to
apply the facts it holds, asks ``schedule.plan`` for the outside call to make
next, makes it outside any transaction, and applies the answer with one of the
``on_*`` functions of ``answers.py``. Every function is pure: values in, new values out.

States of a Pipeline: ``preparing`` → ``running`` → ``succeeded`` | ``failed``;
``stopping`` → ``stopped`` after an accepted stop. States of a step:
``waiting`` → ``pinned`` → ``launching`` → ``launched`` → (``ready`` for a
service) → ``succeeded`` | ``failed``; ``cancelling`` → ``cancelled`` when its Run
is stopped; ``skipped`` when it was never launched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime

from pipeline_coordination.domain import graph, identities
from pipeline_coordination.domain.collection import Item, Shape

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
    needs: tuple[int, ...] = ()  # indices of the steps this one runs after (immutable)
    when: str = graph.SUCCESS
    carried_from: str = ""  # a rerun --failed step that kept the result of this Pipeline's Run
    # A collection step (domain/collection.py): its shape (immutable), id and children.
    collection: Shape | None = None
    collection_id: str = ""
    items: tuple[Item, ...] = ()
    cancelled_by: str = ""  # the member who cancelled the collection (CancelCollection)
    cancel_reason: str = ""
    array_decision: str = ""

    @property
    def is_collection(self) -> bool:
        """Whether the step runs its action once per item (``matrix`` or ``parameters``)."""
        return self.collection is not None

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
        if self.carried_from:
            return False  # the Run belongs to the Pipeline it was carried from
        if self.is_collection:
            return any(i.awaiting_end for i in self.items)
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
    max_active: int = graph.DEFAULT_MAX_ACTIVE
    rerun_of: str = ""

    def step(self, index: int) -> Step:
        """The step with this 1-based index; raises KeyError when there is none."""
        if 0 < index <= len(self.steps) and self.steps[index - 1].index == index:
            return self.steps[index - 1]  # steps are saved and loaded in index order
        for s in self.steps:
            if s.index == index:
                return s
        raise KeyError(f"pipeline {self.pipeline_id} has no step {index}")

    def with_step(self, new: Step) -> Pipeline:
        """A copy with the step of the same index replaced by ``new``."""
        return replace(self, steps=tuple(new if s.index == new.index else s for s in self.steps))

    @property
    def needs_work(self) -> bool:
        """Whether the coordinator still has something to do or to wait for."""
        if self.state not in PIPELINE_TERMINAL:
            return True
        return any(needs_cancel(self, s) for s in self.steps)


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
    needs: tuple[str, ...] = ()  # as actions.yaml names them (PrepareBranch only)
    when: str = graph.SUCCESS
    collection: Shape | None = None  # matrix or parameters (PrepareBranch only)


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
    array_start: str = ""  # a collection child's: how Execution Core started it (array groups)


@dataclass(frozen=True)
class Effect:
    """The one outside call the coordinator makes next.

    kind: ``prepare-branch`` | ``pin`` | ``launch`` | ``observe`` | ``cancel`` |
    ``service-timeout`` (no call: the step's readiness deadline passed);
    ``launch-item`` | ``observe-item`` | ``cancel-item`` for child ``item`` of a collection step.
    """

    kind: str
    step: int = 0
    item: int = 0


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


def validate_start(repository_url: str, branch: str, actions: list[str], max_active: int = 0) -> None:
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
    try:
        graph.bounded_max_active(max_active)
    except ValueError as e:
        problems.append(str(e))
    if problems:
        raise InvalidStart(problems)


def steps_from_prepared(prepared: list[PreparedAction], requested: tuple[str, ...]) -> tuple[Step, ...]:
    """The steps of a Pipeline, with their graph, from PrepareBranch's reply (actions.yaml order).

    With ``requested`` empty every action becomes a step in file order; otherwise
    the requested actions, in the requested order. The needs come from the file
    (``graph.step_needs``: a file without needs is a chain in step order).
    Raises :class:`StepSelectionError` when a requested action is not in the
    branch or the branch has no action, and :class:`graph.GraphError` when the
    graph cannot be run.
    """
    by_name = {p.action: p for p in prepared}
    if requested:
        missing = [a for a in requested if a not in by_name]
        if missing:
            # Name what is there, as `metallo action run` does.
            raise StepSelectionError(
                f"not in the branch's actions.yaml: {', '.join(missing)} "
                f"(actions: {', '.join(sorted(by_name)) or 'none'})"
            )
        chosen = [by_name[a] for a in requested]
    else:
        chosen = list(prepared)
    if not chosen:
        raise StepSelectionError("the branch's actions.yaml has no action")
    needs = graph.step_needs(
        [c.action for c in chosen], {p.action: p.needs for p in prepared}, [p.action for p in prepared]
    )
    for c in chosen:
        if c.when not in graph.WHEN:
            raise graph.GraphError(graph.R_GRAPH_INVALID, f"action {c.action!r}: when {c.when[:40]!r} is not one of "
                                   "success, failure, always")
    return tuple(
        Step(
            index=i,
            action=p.action,
            workload_id=p.workload_id,
            prepared_revision=p.revision,
            family=p.family,
            environment=p.environment,
            service_kind=p.service_kind,
            needs=needs[i - 1],
            when=p.when,
            collection=p.collection,
        )
        for i, p in enumerate(chosen, start=1)
    )


# ---------------------------------------------------------------- facts


def needs_cancel(p: Pipeline, s: Step) -> bool:
    """A live Run the Pipeline must cancel: it is stopping/stopped, it failed, or its own step failed.

    A step fails with its Run still alive only when a service was not ready in
    time; that Run is cancelled at once, whatever the other branches do.
    """
    ending = p.desired_state == DESIRED_STOP or p.state == FAILED or s.state == STEP_FAILED
    return ending and bool(s.run_id) and s.awaiting_end and not s.cancel_requested


@dataclass(frozen=True)
class StepIdentity:
    """Which step a Run belongs to, read from its labels or launch key."""

    pipeline_id: str
    step: int
    attempt: int = 1
    item: int = 0  # the collection child, 0 for a step's own Run


def step_of_run(labels: dict[str, str], launch_key: str) -> StepIdentity | None:
    """The Pipeline step (and collection child) a Run event is about, or None for a Run no Pipeline launched."""
    parsed = identities.parse_launch_key(launch_key) if launch_key else None
    if parsed is not None:
        return StepIdentity(*parsed)
    child = identities.parse_item_key(launch_key) if launch_key else None
    if child is not None:
        return StepIdentity(*child)
    pid, step = labels.get("pipeline_id"), labels.get("pipeline_step")
    if pid and step and step.isdigit():
        return StepIdentity(pid, int(step))
    return None

