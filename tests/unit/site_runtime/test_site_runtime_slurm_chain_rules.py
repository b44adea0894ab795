"""The decisions of one Slurm observe cycle (domain/slurm_chain.py): outcome, next
stage or deadline, phase. Stages are plain values; no Slurm needed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from site_runtime.domain.slurm_chain import (
    NextStep,
    Verdict,
    deadline_refuses,
    decide_outcome,
    next_submission,
    observed_phase,
    terminal_observation,
)


@dataclass
class Stage:
    stage: str
    state: str = "prepared"
    job_id: str | None = None
    native: dict[str, Any] | None = None
    refusal: dict[str, Any] | None = None


def chain(**rows: Stage) -> dict[str, Stage]:
    names = {"stage_in": "stage-in", "compute": "compute", "stage_out": "stage-out"}
    return {n: rows.get(k) or Stage(n) for k, n in names.items()}


def ended(stage: str, job: str, state: str, exit_code=None, signal=None) -> Stage:
    native = {"state": state, "terminal": True, "exit_code": exit_code, "signal": signal}
    return Stage(stage, "submitted", job, native)


def live(stage: str, job: str, state: str = "PENDING") -> Stage:
    return Stage(stage, "submitted", job, {"state": state, "terminal": False})


@pytest.mark.parametrize(
    ("rows", "cancel", "verdict"),
    [
        ({}, False, None),
        ({"stage_in": live("stage-in", "1", "RUNNING")}, False, None),
        (
            {"stage_in": Stage("stage-in", "refused", refusal={"code": "slurm-error-2005"})},
            False,
            Verdict(
                "failed",
                failure={
                    "stage": "stage-in",
                    "scheduler_state": None,
                    "job_id": None,
                    "exit_code": None,
                    "signal": None,
                    "code": "slurm-error-2005",
                },
            ),
        ),
        (
            {
                "stage_in": ended("stage-in", "1", "COMPLETED", 0),
                "compute": ended("compute", "2", "OUT_OF_MEMORY", 0, 9),
                "stage_out": live("stage-out", "3"),
            },
            False,
            Verdict(
                "failed",
                "OUT_OF_MEMORY",
                {
                    "stage": "compute",
                    "scheduler_state": "OUT_OF_MEMORY",
                    "job_id": "2",
                    "exit_code": 0,
                    "signal": 9,
                    "code": "out-of-memory",
                },
            ),
        ),
        # cancelled at the Site (nobody asked Metallo): its record says where and how
        (
            {"stage_in": ended("stage-in", "1", "CANCELLED")},
            False,
            Verdict(
                "cancelled",
                "CANCELLED",
                {
                    "stage": "stage-in",
                    "scheduler_state": "CANCELLED",
                    "job_id": "1",
                    "exit_code": None,
                    "signal": None,
                    "code": "cancelled-at-site",
                },
            ),
        ),
        # a job Slurm requeued past its bound fails the Attempt whatever the re-run did
        (
            {
                "stage_in": ended("stage-in", "1", "COMPLETED", 0),
                "compute": Stage(
                    "compute",
                    "submitted",
                    "2",
                    {"state": "COMPLETED", "terminal": True, "exit_code": 0,
                     "restarts": 1, "requeue_refused": True},
                ),
                "stage_out": ended("stage-out", "3", "COMPLETED", 0),
            },
            False,
            Verdict(
                "failed",
                "COMPLETED",
                {
                    "stage": "compute",
                    "scheduler_state": "COMPLETED",
                    "job_id": "2",
                    "exit_code": 0,
                    "signal": None,
                    "code": "slurm-job-requeued",
                },
            ),
        ),
        (
            {
                "stage_in": ended("stage-in", "1", "COMPLETED", 0),
                "compute": ended("compute", "2", "COMPLETED", 0),
                "stage_out": ended("stage-out", "3", "COMPLETED", 0),
            },
            False,
            Verdict("succeeded", "COMPLETED"),
        ),
        # cancelled with nothing live and no submission in doubt
        (
            {"stage_in": ended("stage-in", "1", "COMPLETED", 0)},
            True,
            Verdict("cancelled", "CANCELLED"),
        ),
        ({}, True, Verdict("cancelled", "CANCELLED")),
        # ...but not while a job lives or a submission is in doubt
        ({"stage_in": live("stage-in", "1", "RUNNING")}, True, None),
        ({"stage_in": Stage("stage-in", "submitting")}, True, None),
    ],
)
def test_decide_outcome(rows, cancel, verdict):
    assert decide_outcome(chain(**rows), cancel) == verdict


def test_the_first_failed_stage_decides():
    rows = chain(
        stage_in=ended("stage-in", "1", "COMPLETED", 0),
        compute=ended("compute", "2", "TIMEOUT"),
        stage_out=ended("stage-out", "3", "FAILED", 87),
    )
    assert decide_outcome(rows, False).failure["code"] == "wall-time-exceeded"


def test_terminal_observation_takes_the_exit_code_of_the_right_stage():
    rows = chain(compute=ended("compute", "2", "COMPLETED", 4))
    won = terminal_observation(Verdict("succeeded", "COMPLETED"), rows, "T", "c" * 40)
    assert (won["exit_code"], won["output_commit"], won["observed_at"]) == (4, "c" * 40, "T")
    failure = {"exit_code": 3, "signal": None, "code": "stage-failed"}
    lost = terminal_observation(Verdict("failed", "FAILED", failure), rows, "T")
    assert (lost["exit_code"], lost["failure"], lost["endpoint"]) == (3, failure, None)


@pytest.mark.parametrize(
    ("rows", "cancel", "deadline", "now", "step"),
    [
        ({}, False, None, 0, None),
        ({"stage_in": live("stage-in", "1", "RUNNING")}, False, None, 0, None),
        (
            {"stage_in": ended("stage-in", "1", "COMPLETED", 0)},
            False,
            None,
            0,
            NextStep("submit", "compute", "1"),
        ),
        (
            {"stage_in": ended("stage-in", "1", "COMPLETED", 0)},
            False,
            100.0,
            99.0,
            NextStep("submit", "compute", "1"),
        ),
        (
            {"stage_in": ended("stage-in", "1", "COMPLETED", 0)},
            False,
            100.0,
            100.0,
            NextStep("deadline-passed", "compute"),
        ),
        (
            {
                "stage_in": ended("stage-in", "1", "COMPLETED", 0),
                "compute": ended("compute", "2", "COMPLETED", 0),
            },
            False,
            100.0,
            500.0,  # stage-out still runs after the deadline: outputs are saved
            NextStep("submit", "stage-out", "2"),
        ),
        ({"stage_in": ended("stage-in", "1", "COMPLETED", 0)}, True, None, 0, None),
        (
            {
                "stage_in": ended("stage-in", "1", "COMPLETED", 0),
                "compute": Stage("compute", "submitting"),
            },
            False,
            None,
            0,
            None,
        ),
    ],
)
def test_next_submission(rows, cancel, deadline, now, step):
    assert next_submission(chain(**rows), cancel, deadline, now) == step


@pytest.mark.parametrize(
    ("stage", "deadline", "now", "refused"),
    [
        ("stage-in", None, 10**12, False),
        ("stage-in", 10.0, 9.9, False),
        ("stage-in", 10.0, 10.0, True),
        ("compute", 10.0, 11.0, True),
        ("stage-out", 10.0, 11.0, False),
    ],
)
def test_deadline_refuses(stage, deadline, now, refused):
    assert deadline_refuses(stage, deadline, now) is refused


@pytest.mark.parametrize(
    ("reported", "rows", "phase"),
    [
        (False, {"stage_in": live("stage-in", "1", "RUNNING")}, "queued"),
        (False, {"compute": live("compute", "2", "CONFIGURING")}, "queued"),
        (False, {"compute": live("compute", "2", "RUNNING")}, "running"),
        (False, {"compute": ended("compute", "2", "FAILED", 1)}, "running"),
        (False, {"stage_out": live("stage-out", "3")}, "running"),
        (True, {}, "running"),  # never back to queued
    ],
)
def test_observed_phase(reported, rows, phase):
    assert observed_phase(reported, chain(**rows)) == phase
