"""Cancelling a staged Slurm Attempt (docs/site-runtime.md, Slurm executor).

Every submitted job is cancelled newest first (stage-out, compute, stage-in), so a
job whose ``afterok`` predecessor is cancelled never starts in between. Each
job's answer is read against what Slurm shows of it afterwards, and the answers
fold into the command's one message: ``accepted`` (something was stopped),
``already-terminal`` (everything had ended) or ``not-found`` (nothing was
submitted). Pure functions; the executor does the requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from site_runtime.domain.slurm_chain import StageView
from site_runtime.domain.slurm_jobs import NativeJob
from site_runtime.domain.slurm_stages import STAGES


@dataclass(frozen=True)
class CancelStep:
    """One job to cancel: its stage, job id, and whether its saved facts say it ended."""

    stage: str
    job_id: str
    ended: bool


def cancellation_order(stages: Mapping[str, StageView]) -> list[CancelStep]:
    """The submitted jobs of the chain, newest stage first."""
    return [
        CancelStep(stage, row.job_id, bool((row.native or {}).get("terminal")))
        for stage in reversed(STAGES)
        if (row := stages[stage]).job_id
    ]


def settled_answer(answer: str, seen: NativeJob | None) -> str | None:
    """One job's cancel ``answer`` (``accepted`` / ``already-terminal`` /
    ``not-found``) read against the job as Slurm shows it now (``seen``).

    ``already-terminal`` for a job now ``CANCELLED`` is ``accepted`` (an earlier,
    interrupted run of this same cancellation stopped it). ``not-found`` is settled
    by the job's record: ended → ``already-terminal``, else ``accepted``; with no
    record at all the answer is None — a 404 and an empty accounting page are not
    proof of absence, so the caller defers.
    """
    if answer == "already-terminal":
        return "accepted" if seen is not None and seen.state == "CANCELLED" else answer
    if answer == "not-found":
        if seen is None:
            return None
        return "already-terminal" if seen.terminal else "accepted"
    return answer


def fold_answers(answers: Iterable[str]) -> str:
    """The cancel command's message from every job's answer (module doc)."""
    answers = list(answers)
    if "accepted" in answers:
        return "accepted"
    return "already-terminal" if answers else "not-found"


def task_cancelled() -> dict[str, Any]:
    """The saved facts of an array task whose ``scancel JOBID_TASK`` was accepted: it
    ended ``CANCELLED`` (slurmctld keeps no record of a task cancelled while its
    array is pending, so the answer is all the evidence there is)."""
    return {
        "state": "CANCELLED",
        "terminal": True,
        "exit_code": None,
        "signal": None,
        "reason": None,
        "source": "scancel",
    }
