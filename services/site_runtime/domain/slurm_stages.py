"""The Slurm state model of a staged Attempt (docs/site-runtime.md, Slurm executor).

One Attempt is three jobs, ``stage-in`` → ``compute`` → ``stage-out``. This module
names the stages, sorts Slurm's job states into terminal / active / started,
turns an ended stage into its failure code, and says which job's state the
Attempt reports. Pure functions over plain values; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

STAGES = ("stage-in", "compute", "stage-out")
#: The stages that move the repository (each gets a just-in-time repository grant).
STAGING_STAGES = ("stage-in", "stage-out")
NAME_SUFFIX = {"stage-in": "-in", "compute": "", "stage-out": "-out"}

# Job states that end a job: the outcome then saved is immutable evidence.
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
#: States of a job whose commands run or ran. ``CONFIGURING`` is not one: the job
#: holds its nodes while they boot and none of its commands has begun, so an Attempt
#: whose compute job configures is still ``queued``.
STARTED_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED"})

#: Script exit statuses (adaptors/slurm/scripts.py) with a failure code of their own.
EXIT_WORKSPACE = 70
EXIT_REPOSITORY_TRANSFER = 75
EXIT_COMMIT_MISSING = 86
EXIT_PUSH = 87

#: (stage, exit status) -> failure code (docs/site-runtime.md, Failure codes).
EXIT_CODES = {
    ("stage-in", EXIT_WORKSPACE): "workspace-unavailable",
    ("stage-in", EXIT_REPOSITORY_TRANSFER): "repository-transfer-failed",
    ("stage-in", EXIT_COMMIT_MISSING): "repository-commit-missing",
    ("compute", EXIT_WORKSPACE): "workspace-unavailable",
    ("stage-out", EXIT_WORKSPACE): "workspace-unavailable",
    ("stage-out", EXIT_PUSH): "repository-push-failed",
    ("stage-out", EXIT_REPOSITORY_TRANSFER): "repository-transfer-failed",
}

#: Scheduler end state -> failure code, for a stage without a script exit code.
SCHEDULER_FAILURE_CODES = {
    "TIMEOUT": "wall-time-exceeded",
    "OUT_OF_MEMORY": "out-of-memory",
    "NODE_FAIL": "node-failure",
    "BOOT_FAIL": "node-failure",
    "DEADLINE": "scheduler-deadline",
    "PREEMPTED": "preempted",
}


def is_terminal(state: str | None) -> bool:
    """True when a job in ``state`` has ended."""
    return state in TERMINAL_STATES


def has_started(state: str | None, terminal: bool = False) -> bool:
    """The one rule for "started": the job's commands run or ran (a started state, or
    ended). ``terminal`` is the saved flag of a stage's last facts."""
    return state in STARTED_STATES or terminal or is_terminal(state)


def failure_code(stage: str, state: str | None, exit_code: int | None) -> str:
    """The failure code of ``stage`` ended in ``state`` with ``exit_code``: the
    script's own code first, then the scheduler state's, else ``stage-failed``."""
    return (
        EXIT_CODES.get((stage, exit_code))
        or SCHEDULER_FAILURE_CODES.get(state or "")
        or "stage-failed"
    )


def reported_stage(
    stages: Sequence[tuple[str, str | None, Mapping[str, Any] | None]],
) -> tuple[str | None, dict[str, Any]]:
    """The stage an Attempt reports and its saved facts: the first submitted stage not
    yet ended (``PENDING`` before its first facts), else the last submitted one.

    ``stages`` is ``(stage, job id, saved facts)`` per stage in :data:`STAGES` order.
    Later jobs wait on ``afterok`` and read PENDING while an earlier one runs, so the
    Attempt is reported by the job that is actually current. ``(None, {})`` before
    any job was submitted.
    """
    last: tuple[str | None, dict[str, Any]] = (None, {})
    for stage, job_id, facts in stages:
        if not job_id:
            continue
        current = dict(facts or {})
        current["state"] = current.get("state") or "PENDING"
        last = (stage, current)
        if not current.get("terminal"):
            return last
    return last


def native_state(stages: Sequence[tuple[str | None, Mapping[str, Any] | None]]) -> str | None:
    """The Slurm state an Attempt reports (:func:`reported_stage`'s); ``stages`` is
    ``(job id, saved facts)`` per stage in :data:`STAGES` order."""
    named = [(stage, job_id, facts) for stage, (job_id, facts) in zip(STAGES, stages, strict=False)]
    return reported_stage(named)[1].get("state")
