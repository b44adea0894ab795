"""The facts and the Decision of the Run lifecycle (seed 004 §4D, §4E; seed 002 §9.2).

The Run Supervisor turns its rows into these frozen views, hands them to
:func:`~execution_core.domain.lifecycle.decide`, and persists the returned
:class:`Decision`. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from execution_core.domain import states as s


@dataclass(frozen=True)
class CommandFact:
    """A Site command of an Attempt and its recorded result (None while pending).

    ``seq`` orders the Attempt's commands by creation; ``result_at`` is the
    PostgreSQL time the result was applied.
    """

    command_id: str
    kind: str
    ordinal: int
    seq: int
    created_at: datetime
    outcome: str | None = None  # succeeded | refused | None
    code: str | None = None
    native_jobs: tuple[dict[str, Any], ...] = ()
    observation: dict[str, Any] | None = None
    result_at: datetime | None = None


@dataclass(frozen=True)
class AttemptView:
    """The current Attempt with every command sent for it."""

    attempt_id: str
    number: int
    state: str
    created_at: datetime
    dispatch_deadline: datetime
    commands: tuple[CommandFact, ...] = ()
    # ADR 0016: the Site noticed its end when the newest command had this seq.
    native_end_noticed_after_seq: int | None = None
    lost_marked: bool = False  # an operator's mark-lost (ReconcileRun)
    deferred_command_id: str | None = None  # the pending command the Site reported deferred
    array: Any = None  # the Attempt's array group (domain.arrays.ArrayFacts), None: none


@dataclass(frozen=True)
class RunView:
    """What the decision needs of the Run.

    ``material`` is the prepare/apply payload without its deadline
    (docs/site-commands.md); ``cancel_origin`` is ``member`` or ``deadline``.
    """

    run_id: str
    family: str
    desired_state: str
    phase: str
    max_attempts: int
    backoff_seconds: float
    material: dict[str, Any]
    cancel_origin: str = ""
    retry_at: datetime | None = None
    started: bool = False
    retry_on_lost: bool = False  # the action's retry.onLost
    site_draining: bool = False  # an operator drains the Run's target Site: no new Attempt


@dataclass(frozen=True)
class Timing:
    """Supervisor timing, all in seconds (configurable; tests use short values)."""

    observe_interval: float = 30.0  # between two observe commands of an active Attempt
    first_observe: float = 1.0  # start result → first observe; doubles up to observe_interval
    result_recheck: float = 30.0  # how often to look again while a result is awaited
    stale_after: float = 120.0  # an observation older than this is "stale"
    dispatch_timeout: float = 3600.0  # from Attempt creation to the dispatch deadline
    lost_after: float = 900.0  # the Site does not know a started Attempt this long → lost
    lost_observe_max: float = 120.0  # the longest wait between two asks meanwhile


@dataclass
class AttemptUpdate:
    """New values for the current Attempt's row."""

    state: str
    native_jobs: list[dict[str, Any]] = field(default_factory=list)
    observation_phase: str = ""
    native_state: str = ""
    exit: dict[str, Any] = field(default_factory=dict)
    reason_code: str = ""
    started: bool = False
    ended: bool = False


@dataclass
class Decision:
    """What the supervisor must persist, atomically, for one step.

    ``commands`` are (kind, payload) for the current Attempt — or for the new
    Attempt when ``new_attempt_number`` is set. ``end`` is (outcome,
    reason_code) when the Run becomes terminal (with RunCompleted in the same
    transaction). ``wake_at`` is when to look again if no result arrives first.
    """

    phase: str
    desired_state: str
    cancel_origin: str
    attempt: AttemptUpdate | None
    commands: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    new_attempt_number: int | None = None
    new_attempt_deadline: datetime | None = None
    observation_phase: str = ""
    native_state: str = ""
    confidence: str = s.CONFIDENCE_NONE
    exit: dict[str, Any] = field(default_factory=dict)
    output_commit: str = ""
    endpoint: str = ""
    end: tuple[str, str] | None = None
    emit_started: bool = False
    retry_at: datetime | None = None
    wake_at: datetime | None = None
    native_wait: str = ""  # native-wait code of the chosen observation
    native_stage: str = ""  # the stage its native state belongs to
    # Execution Core's own waiting code ("" = none of its own; None = leave as it is).
    waiting_reason: str | None = None


def kinds(family: str) -> tuple[str, str, str]:
    """(prepare kind, native start kind, stop kind) of a workload family."""
    if family == s.QUEUED_BATCH:
        return "prepare", "start", "cancel"
    return "apply", "apply", "terminate"


def prepare_payload(material: dict[str, Any], deadline: datetime) -> dict[str, Any]:
    """The prepare/apply payload: the saved material plus the dispatch deadline (UTC, ISO 8601)."""
    return {**material, "deadline": iso_utc(deadline)}


def iso_utc(t: datetime) -> str:
    """``t`` as ``YYYY-MM-DDTHH:MM:SSZ``; a naive datetime is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
