"""Views of the slurm journal that results are built from: an Attempt's native jobs,
the state it reports, the facts saved of a job, a non-terminal observation."""

from __future__ import annotations

from typing import Any

from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal
from site_runtime.domain.native_waits import SLURM_REQUEUED, slurm_wait
from site_runtime.domain.outcomes import now_iso, observation
from site_runtime.domain.slurm_jobs import NativeJob
from site_runtime.domain.slurm_reconcile import facts_of
from site_runtime.domain.slurm_stages import STAGES, native_state, reported_stage


def attempt(journal: SlurmJournal, attempt_id: str) -> AttemptRow:
    """The journaled Attempt; AssertionError when it is not there (callers checked)."""
    att = journal.attempt(attempt_id)
    assert att is not None
    return att


def native_jobs(journal: SlurmJournal, attempt_id: str) -> list[dict[str, Any]]:
    """``native_jobs`` of a result: ``{stage, job_id}`` per submitted stage, in order."""
    stages = journal.stages(attempt_id)
    return [{"stage": s, "job_id": stages[s].job_id} for s in STAGES if stages[s].job_id]


def reported_state(journal: SlurmJournal, attempt_id: str) -> str | None:
    """The Slurm state the Attempt reports (:func:`~site_runtime.domain.slurm_stages.native_state`)."""
    stages = journal.stages(attempt_id)
    return native_state([(stages[s].job_id, stages[s].native) for s in STAGES])


def native_facts(job: NativeJob) -> dict[str, Any]:
    """The journaled facts of a native job: state, terminal, exit_code, signal, reason, source."""
    return facts_of(job)


def current(phase: str, now: float, native: str | None = None) -> dict[str, Any]:
    """A non-terminal observation in ``phase`` at ``now`` (epoch seconds)."""
    return observation(phase, now_iso(now), native_state=native)


def reported(
    journal: SlurmJournal, attempt_id: str, phase: str, now: float, confidence: str | None
) -> dict[str, Any]:
    """The non-terminal observation of the Attempt's reported stage: its Slurm state,
    the stage, the native-wait code of a pending job's ``Reason`` (``slurm-job-requeued``
    for a job Slurm requeued, while it is not running again), and ``confidence``."""
    stages = journal.stages(attempt_id)
    stage, facts = reported_stage([(s, stages[s].job_id, stages[s].native) for s in STAGES])
    state = facts.get("state")
    wait = slurm_wait(facts.get("reason")) if state == "PENDING" else None
    if facts.get("restarts") and state not in ("RUNNING", "COMPLETING"):
        wait = SLURM_REQUEUED
    return observation(
        phase,
        now_iso(now),
        native_state=state,
        native_stage=stage,
        native_wait=wait,
        confidence=confidence,
    )
