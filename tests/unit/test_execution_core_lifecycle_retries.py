"""The pure Run lifecycle's retries and refusals (seed 004 §4E): a definite failure is
retried as a new Attempt within policy, a permanent refusal or incurable failure is not,
an uncertain start is never repeated, and deadlines end what never started."""

from __future__ import annotations

from execution_core.domain import reasons
from execution_core.domain import states as s
from tests.unit.execution_core_lifecycle_sim import Sim


def test_definite_failure_retries_as_a_new_attempt_within_policy():
    sim = Sim(max_attempts=2, backoff=30)
    sim.run_until_observed()
    sim.result(
        "observe",
        phase="failed",
        failure={"stage": "compute", "code": "exit-nonzero", "exit_code": 3},
    )
    d = sim.step()
    assert d.end is None and d.phase == s.PHASE_RETRY_WAIT and d.attempt.state == s.ATTEMPT_FAILED
    assert d.attempt.reason_code == "exit-nonzero" and d.exit["exit_code"] == 3
    sim.wait(10)
    assert sim.step().new_attempt_number is None  # backoff not over
    sim.wait(20)
    d = sim.step()
    assert d.new_attempt_number == 2 and [k for k, _ in d.commands] == ["prepare"]
    sim.prepared_until_observed()
    sim.result("observe", phase="failed", failure={"code": "exit-nonzero"})
    d = sim.step()
    assert d.end == (s.OUTCOME_FAILED, "exit-nonzero")
    assert [n for n, k in sim.sent if k == "prepare"] == [1, 2]


def test_permanent_refusal_is_not_retried():
    sim = Sim(max_attempts=3)
    sim.step()
    sim.result("prepare", "refused", "repository-commit-missing")
    d = sim.step()
    assert (
        d.end == (s.OUTCOME_FAILED, "repository-commit-missing")
        and d.attempt.state == s.ATTEMPT_REFUSED
    )
    for code in ("authorisation-refused", "member-consent-refused", "slurm-request-never-fits"):
        sim2 = Sim(max_attempts=3)
        sim2.step()
        sim2.result("prepare")
        sim2.step()
        sim2.result("start", "refused", code)
        assert sim2.step().end == (s.OUTCOME_FAILED, code), code


def test_transient_start_refusal_is_retried():
    sim = Sim(max_attempts=2)
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start", "refused", "slurm-error-2014")
    d = sim.step()
    assert d.phase == s.PHASE_RETRY_WAIT
    assert sim.step().new_attempt_number == 2


def test_uncertain_start_is_never_repeated_and_deadline_stops_it():
    sim = Sim()
    sim.step()
    sim.result("prepare")
    sim.step()  # start sent, no result ever
    for _ in range(5):
        sim.wait(100)
        assert sim.step().commands == []
    assert sim.last.confidence == s.CONFIDENCE_UNCERTAIN
    sim.wait(200)  # past the 600 s dispatch deadline
    d = sim.step()
    assert d.desired_state == s.DESIRED_CANCEL and [k for k, _ in d.commands] == ["cancel"]
    assert d.end is None  # the start may exist: stop it under the same Attempt, then observe
    sim.result("start", "refused", reasons.DISPATCH_DEADLINE_PASSED)
    d = sim.step()
    assert d.end == (s.OUTCOME_FAILED, reasons.DISPATCH_DEADLINE_PASSED)
    assert [k for _, k in sim.sent].count("start") == 1 and sim.attempt.attempt_id == "a1"


def test_deadline_before_start_ends_without_native_work():
    sim = Sim()
    sim.step()  # prepare never answered
    sim.wait(601)
    d = sim.step()
    assert d.end == (s.OUTCOME_FAILED, reasons.DISPATCH_DEADLINE_PASSED)
    assert [k for k, _ in d.commands] == ["cancel"]  # cleans up what prepare may have staged
    assert "start" not in [k for _, k in sim.sent]


def test_an_observed_failure_no_attempt_can_cure_is_not_retried():
    # A local Attempt that waited for a slot is authorised only when it leaves the
    # queue (ADR 0015): a refusal then arrives as an observed failure.
    for code in ("authorisation-refused", "member-consent-refused", "repository-commit-missing"):
        sim = Sim(max_attempts=3)
        sim.run_until_observed()
        sim.result("observe", phase="failed", failure={"code": code})
        assert sim.step().end == (s.OUTCOME_FAILED, code), code
