"""The decisions of one observe cycle of a staged Slurm Attempt (docs/site-runtime.md,
Slurm executor).

Each cycle the executor reads every stage's job, then asks, in order:

1. :func:`decide_outcome` — has the chain ended, and how? (a refused stage, a stage
   that ended other than ``COMPLETED``, stage-out completed, or a cancellation with
   no live job left);
2. :func:`next_submission` — which stage is submitted next (its predecessor
   completed) or does the accepted-work deadline fail the Attempt first;
3. :func:`observed_phase` — ``queued`` or ``running`` (never back once running).

Stages are read through :class:`StageView` (the journal's stage rows satisfy it).
Pure functions; the clock is handed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from site_runtime.domain.outcomes import failure_record, observation
from site_runtime.domain.slurm_reconcile import EVIDENCE_LOST, REQUEUED
from site_runtime.domain.slurm_stages import STAGES, failure_code, has_started

#: Stages the accepted-work deadline refuses once passed: work not yet submitted
#: does not start late. Stage-out still runs, so outputs already made are saved.
DEADLINE_REFUSES = ("stage-in", "compute")
#: The code of a stage job cancelled at the Site without a request from Metallo.
CANCELLED_AT_SITE = "cancelled-at-site"


class StageView(Protocol):
    """What a decision reads of one stage: its journal ``state`` (``prepared``,
    ``submitting``, ``held``, ``submitted``, ``refused``), job id, last native facts
    (``state``, ``terminal``, ``exit_code``, ``signal``) and refusal (``code``)."""

    stage: str
    state: str
    job_id: str | None
    native: dict[str, Any] | None
    refusal: dict[str, Any] | None


@dataclass(frozen=True)
class Verdict:
    """How a chain ended: ``phase`` (succeeded / failed / cancelled), the native state
    reported with it and the failure record of a failed one."""

    phase: str
    native_state: str | None = None
    failure: dict[str, Any] | None = None


@dataclass(frozen=True)
class NextStep:
    """What an observe cycle does next: ``submit`` ``stage`` after job ``after``, or
    fail the Attempt because its ``deadline-passed`` before ``stage`` was submitted."""

    action: str  # "submit" | "deadline-passed"
    stage: str
    after: str | None = None


def deadline_refuses(stage: str, deadline_epoch: float | None, now: float) -> bool:
    """True when ``stage`` must not be submitted now: it is one of
    :data:`DEADLINE_REFUSES` and the deadline (epoch seconds) has passed."""
    return stage in DEADLINE_REFUSES and deadline_epoch is not None and now >= deadline_epoch


def deadline_failure() -> dict[str, Any]:
    """The failure record of an Attempt whose deadline passed before compute."""
    return failure_record("compute", None, None, None, None, "attempt-deadline-passed")


def _facts(row: StageView) -> dict[str, Any]:
    return row.native or {}


def decide_outcome(stages: Mapping[str, StageView], cancel_requested: bool) -> Verdict | None:
    """The chain's end, or None while it goes on.

    The first stage (in order) that was refused or ended other than ``COMPLETED``
    decides: a requeue past the stage's bound → failed ``slurm-job-requeued`` (whatever
    the re-run did); ``CANCELLED`` → cancelled (``cancelled-at-site`` in its record
    when Metallo did not ask for it), else failed with its failure code
    (``native-evidence-lost`` for a stage reconciliation found lost). Else a
    completed stage-out → succeeded; else a requested cancellation with no job still
    live and no submission in doubt → cancelled.
    """
    for stage in STAGES:
        row = stages[stage]
        facts = _facts(row)
        if row.state == "refused":
            code = (row.refusal or {}).get("code")
            return Verdict("failed", failure=failure_record(stage, None, None, None, None, code))
        if facts.get("requeue_refused"):
            state = facts.get("state")
            record = failure_record(
                stage, state, row.job_id, facts.get("exit_code"), facts.get("signal"), REQUEUED
            )
            return Verdict("failed", native_state=state, failure=record)
        if facts.get("terminal") and facts.get("state") != "COMPLETED":
            state = facts.get("state")
            if state == "CANCELLED":
                by_site = None if cancel_requested else CANCELLED_AT_SITE
                record = failure_record(
                    stage, state, row.job_id, facts.get("exit_code"), facts.get("signal"), by_site
                )
                return Verdict("cancelled", native_state="CANCELLED", failure=record)
            code = (
                EVIDENCE_LOST
                if facts.get("lost")
                else failure_code(stage, state, facts.get("exit_code"))
            )
            record = failure_record(
                stage, state, row.job_id, facts.get("exit_code"), facts.get("signal"), code
            )
            return Verdict("failed", native_state=state, failure=record)
    out = _facts(stages["stage-out"])
    if out.get("terminal") and out.get("state") == "COMPLETED":
        return Verdict("succeeded", native_state="COMPLETED")
    if cancel_requested:
        live = any(r.job_id and not _facts(r).get("terminal") for r in stages.values())
        doubtful = any(r.state == "submitting" for r in stages.values())
        if not live and not doubtful:
            return Verdict("cancelled", native_state="CANCELLED")
    return None


def terminal_observation(
    verdict: Verdict,
    stages: Mapping[str, StageView],
    observed_at: str,
    output_commit: str | None = None,
) -> dict[str, Any]:
    """The saved terminal observation of ``verdict``: a succeeded Attempt reports
    compute's exit code, a failed one its failing stage's exit code and signal."""
    failure = verdict.failure or {}
    compute = _facts(stages["compute"])
    return observation(
        verdict.phase,
        observed_at,
        native_state=verdict.native_state,
        exit_code=compute.get("exit_code")
        if verdict.phase == "succeeded"
        else failure.get("exit_code"),
        signal=failure.get("signal"),
        failure=verdict.failure,
        output_commit=output_commit,
    )


def next_submission(
    stages: Mapping[str, StageView],
    cancel_requested: bool,
    deadline_epoch: float | None,
    now: float,
) -> NextStep | None:
    """The stage to submit now — the first whose predecessor ``COMPLETED`` while it is
    still ``prepared`` — or ``deadline-passed`` when the deadline refuses it; None when
    nothing is due (or a cancellation was requested: nothing new starts)."""
    if cancel_requested:
        return None
    for previous, following in zip(STAGES, STAGES[1:], strict=False):
        p, n = stages[previous], stages[following]
        if _facts(p).get("state") == "COMPLETED" and n.state == "prepared":
            if deadline_refuses(following, deadline_epoch, now):
                return NextStep("deadline-passed", following)
            return NextStep("submit", following, p.job_id)
    return None


def contradiction_verdict(stage: str, row: StageView, code: str) -> Verdict:
    """The outcome of an Attempt stopped by a contradiction on ``stage`` (evidence kept
    in the stage's facts): failed with ``code``."""
    facts = _facts(row)
    record = failure_record(
        stage, facts.get("state"), row.job_id, facts.get("exit_code"), facts.get("signal"), code
    )
    return Verdict("failed", native_state=facts.get("state"), failure=record)


def observed_phase(reported_running: bool, stages: Mapping[str, StageView]) -> str:
    """``running`` once compute has started (:func:`~.slurm_stages.has_started`) or
    stage-out was submitted, and for ever after a running observation was reported;
    else ``queued``. An array task of stage-out (``JOBID_TASK``) exists from the
    start, so for a child of an array group only compute's start counts."""
    compute = _facts(stages["compute"])
    stage_out = stages["stage-out"].job_id
    running = (
        reported_running
        or has_started(compute.get("state"), bool(compute.get("terminal")))
        or (stage_out is not None and "_" not in stage_out)
    )
    return "running" if running else "queued"
