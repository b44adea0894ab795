"""Validation of recorded Site results before they are applied (docs/site-commands.md)."""

from __future__ import annotations

import json

import pytest

from execution_core.application.projection import exit_facts, run_completed
from execution_core.application.results import MAX_RESULT_BYTES, parse_result
from execution_core.application.supervisor import site_command_id
from metallo.messaging import PoisonMessage
from metallo.site_coordination.v1 import site_coordination_pb2 as sc


def event(body) -> sc.SiteCommandResultRecorded:
    text = body if isinstance(body, str) else json.dumps(body)
    return sc.SiteCommandResultRecorded(command_id="c1", result_json=text)


def test_a_valid_result_is_bounded_and_normalised():
    r = parse_result(
        event(
            {
                "command_id": "c1",
                "outcome": "succeeded",
                "native_jobs": [{"stage": "compute", "job_id": 42, "extra": "dropped"}],
                "observation": {"phase": "running"},
            }
        )
    )
    assert r["native_jobs"] == [{"stage": "compute", "job_id": "42"}]
    assert r["observation"] == {"phase": "running"} and r["code"] is None


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        "[]",
        {"command_id": "other", "outcome": "succeeded"},
        {"command_id": "c1", "outcome": "maybe"},
        {"command_id": "c1", "outcome": "succeeded", "native_jobs": [{}] * 17},
        {"command_id": "c1", "outcome": "succeeded", "observation": "running"},
        "x" * (MAX_RESULT_BYTES + 1),
    ],
)
def test_unusable_results_are_poison(body):
    with pytest.raises(PoisonMessage):
        parse_result(event(body))


def test_command_ids_are_stable_per_attempt_kind_and_ordinal():
    assert site_command_id("a1", "start", 1) == site_command_id("a1", "start", 1)
    assert len({site_command_id("a1", "observe", n) for n in range(1, 4)}) == 3
    assert site_command_id("a1", "start", 1) != site_command_id("a2", "start", 1)


def test_projection_of_exit_facts_and_completion():
    facts = exit_facts({"exit_code": 3, "failure_code": "exit-nonzero"})
    assert (
        facts.exit_code == 3
        and not facts.HasField("signal")
        and facts.failure_code == "exit-nonzero"
    )
    done = run_completed(
        {
            "run_id": "r",
            "project": "demo",
            "outcome": "failed",
            "reason_code": "exit-nonzero",
            "output_commit": "",
            "launch_command_id": "c",
            "launch_key": None,
            "labels": {"step": "1"},
            "workload_id": "w",
            "revision": 2,
            "attempt_count": 3,
        }
    )
    assert (done.outcome, done.attempts, dict(done.labels)) == ("failed", 3, {"step": "1"})
