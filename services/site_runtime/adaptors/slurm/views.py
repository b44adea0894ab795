"""Views of the slurm journal that results are built from: an Attempt's native jobs,
the state it reports, the facts saved of a job, a non-terminal observation."""

from __future__ import annotations

from typing import Any

from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal
from site_runtime.domain.outcomes import now_iso, observation
from site_runtime.domain.slurm_jobs import NativeJob
from site_runtime.domain.slurm_stages import STAGES, native_state


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
    return {
        "state": job.state,
        "terminal": job.terminal,
        "exit_code": job.exit_code,
        "signal": job.signal,
        "reason": job.reason,
        "source": job.source,
    }


def current(phase: str, now: float, native: str | None = None) -> dict[str, Any]:
    """A non-terminal observation in ``phase`` at ``now`` (epoch seconds)."""
    return observation(phase, now_iso(now), native_state=native)
