"""Observations and failure records shared by the executors (domain/outcomes.py), the
local executor's use of them, and the deferral each native trouble is
(domain/native_errors.py)."""

from __future__ import annotations

import pytest

from site_runtime.domain.deferrals import is_catalogued
from site_runtime.domain.local_batch import StageFacts
from site_runtime.domain.local_batch import failure_record as local_failure_record
from site_runtime.domain.native_errors import DEFERRAL_FOR, deferral_for
from site_runtime.domain.outcomes import failure_record, now_iso, observation

FIELDS = {
    "phase",
    "native_state",
    "exit_code",
    "signal",
    "failure",
    "output_commit",
    "endpoint",
    "native_stage",
    "native_wait",
    "observed_at",
}


def test_an_observation_always_has_its_ten_fields_and_confidence_when_not_current():
    assert set(observation("queued", "T")) == FIELDS
    assert observation("queued", "T", confidence="stale")["confidence"] == "stale"
    with pytest.raises(ValueError):
        observation("queued", "T", confidence="sure")
    assert observation("running", "T", native_state="RUNNING")["native_state"] == "RUNNING"


def test_a_failure_record_holds_the_six_facts_only():
    assert failure_record("compute", "FAILED", "7", 3, None, "stage-failed") == {
        "stage": "compute",
        "scheduler_state": "FAILED",
        "job_id": "7",
        "exit_code": 3,
        "signal": None,
        "code": "stage-failed",
    }


@pytest.mark.parametrize(
    ("facts", "scheduler_state", "code"),
    [
        (StageFacts("compute", "failed", pid=42, exit_code=2), "FAILED", "compute-failed"),
        (
            StageFacts("stage-in", "failed", code="repository-transfer-failed"),
            "FAILED",
            "repository-transfer-failed",
        ),
        (
            StageFacts("compute", "failed", pid=4, signal=9, code="wall-time-exceeded"),
            "TIMEOUT",
            "wall-time-exceeded",
        ),
        (StageFacts("stage-out", "cancelled", pid=5, signal=15), "CANCELLED", "stage-out-failed"),
    ],
)
def test_the_local_executor_uses_the_shared_record(facts, scheduler_state, code):
    record = local_failure_record(facts)
    assert record == failure_record(
        facts.stage,
        scheduler_state,
        str(facts.pid) if facts.pid else None,
        facts.exit_code,
        facts.signal,
        code,
    )


def test_now_iso_is_utc_seconds():
    assert now_iso(0) == "1970-01-01T00:00:00Z"
    assert now_iso(1764586923.9) == "2025-12-01T11:02:03Z"


@pytest.mark.parametrize(
    ("trouble", "code"),
    [
        ("slurm-unreachable", "slurm-unavailable"),
        ("slurm-uncertain", "slurm-observation-unavailable"),
        ("member-token-unusable", "identity-provider-unavailable"),
        ("issuer-keys-unavailable", "identity-provider-unavailable"),
    ],
)
def test_each_trouble_defers_with_a_catalogued_code(trouble, code):
    assert deferral_for(trouble)[0] == code and is_catalogued(code)


def test_every_trouble_is_catalogued_and_unknown_ones_are_errors():
    assert all(is_catalogued(code) for code, _ in DEFERRAL_FOR.values())
    with pytest.raises(KeyError):
        deferral_for("disk-on-fire")
