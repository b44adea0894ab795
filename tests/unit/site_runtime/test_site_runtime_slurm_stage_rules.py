"""The Slurm state model (domain/slurm_stages.py): terminal / started states, the
failure-code tables and the state an Attempt reports. No Slurm needed."""

from __future__ import annotations

import pytest

from site_runtime.domain.slurm_jobs import NativeJob
from site_runtime.domain.slurm_stages import (
    ACTIVE_STATES,
    STARTED_STATES,
    TERMINAL_STATES,
    failure_code,
    has_started,
    is_terminal,
    native_state,
)


@pytest.mark.parametrize(
    ("stage", "state", "exit_code", "code"),
    [
        ("compute", "NODE_FAIL", None, "node-failure"),
        ("compute", "BOOT_FAIL", None, "node-failure"),
        ("compute", "OUT_OF_MEMORY", 0, "out-of-memory"),
        ("compute", "TIMEOUT", None, "wall-time-exceeded"),
        ("compute", "DEADLINE", None, "scheduler-deadline"),
        ("compute", "PREEMPTED", None, "preempted"),
        ("compute", "FAILED", 3, "stage-failed"),
        ("compute", "SPECIAL_EXIT", None, "stage-failed"),
        ("compute", "SOMETHING_NEW", None, "stage-failed"),
        ("compute", None, None, "stage-failed"),
        # the scripts' own exit statuses come first
        ("stage-in", "FAILED", 75, "repository-transfer-failed"),
        ("stage-in", "FAILED", 86, "repository-commit-missing"),
        ("stage-in", "FAILED", 70, "workspace-unavailable"),
        ("compute", "FAILED", 70, "workspace-unavailable"),
        ("compute", "FAILED", 75, "stage-failed"),  # 75 means nothing for compute
        ("stage-out", "FAILED", 87, "repository-push-failed"),
        ("stage-out", "FAILED", 75, "repository-transfer-failed"),
        ("stage-out", "TIMEOUT", 87, "repository-push-failed"),
    ],
)
def test_failure_codes(stage, state, exit_code, code):
    assert failure_code(stage, state, exit_code) == code


@pytest.mark.parametrize(
    ("state", "terminal", "started"),
    [
        ("PENDING", False, False),
        ("CONFIGURING", False, False),  # nodes boot; no command has begun
        ("REQUEUED", False, False),
        ("RUNNING", False, True),
        ("COMPLETING", False, True),
        ("SUSPENDED", False, True),
        ("STOPPED", False, True),
        ("COMPLETED", True, True),
        ("CANCELLED", True, True),
        ("NODE_FAIL", True, True),
        (None, False, False),
    ],
)
def test_one_rule_for_started(state, terminal, started):
    assert has_started(state) is started
    assert is_terminal(state) is terminal
    job = NativeJob("1", "n", "c", "a", "u", state or "PENDING", None, None, None, None, None, "x")
    assert job.started is has_started(state or "PENDING")


def test_the_state_sets_do_not_overlap():
    assert not TERMINAL_STATES & ACTIVE_STATES
    assert STARTED_STATES <= ACTIVE_STATES


DONE = {"state": "COMPLETED", "terminal": True}
RUNNING = {"state": "RUNNING", "terminal": False}
FAILED = {"state": "FAILED", "terminal": True}


@pytest.mark.parametrize(
    ("stages", "reported"),
    [
        ([(None, None), (None, None), (None, None)], None),
        ([("1", None), ("2", None), ("3", None)], "PENDING"),
        ([("1", RUNNING), ("2", None), ("3", None)], "RUNNING"),
        # compute runs while stage-out waits on it: RUNNING, not PENDING
        ([("1", DONE), ("2", RUNNING), ("3", None)], "RUNNING"),
        ([("1", DONE), ("2", DONE), ("3", None)], "PENDING"),
        ([("1", DONE), ("2", DONE), ("3", DONE)], "COMPLETED"),
        ([("1", DONE), ("2", FAILED), (None, None)], "FAILED"),
    ],
)
def test_the_current_job_speaks_for_the_attempt(stages, reported):
    assert native_state(stages) == reported
