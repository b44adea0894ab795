"""The pure Run lifecycle's cancellation (seed 004 §7C): fenced before start, observed
to its end while running, never overriding a recorded success, ending a retry wait."""

from __future__ import annotations

from dataclasses import replace

from execution_core.domain import reasons
from execution_core.domain import states as s
from tests.unit.execution_core_lifecycle_sim import Sim


def test_cancel_before_start_fences_the_start():
    sim = Sim()
    sim.step()
    sim.result("prepare")
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    d = sim.step()
    assert d.end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BEFORE_START)
    assert "start" not in [k for _, k in sim.sent]


def test_cancel_while_running_observes_before_terminal():
    sim = Sim()
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start", phase="running")
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    d = sim.step()
    assert [k for k, _ in d.commands] == ["cancel"] and d.phase == s.PHASE_CANCELLING
    sim.result("cancel")
    d = sim.step()
    assert d.end is None and [k for k, _ in d.commands] == [
        "observe"
    ]  # observe at once after cancel
    sim.result("observe", phase="running")
    sim.wait(10)
    d = sim.step()
    assert d.end is None and [k for k, _ in d.commands] == ["observe"]
    sim.result("observe", phase="cancelled", native_state="CANCELLED")
    d = sim.step()
    assert d.end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BY_MEMBER)
    # The Attempt says why too (`metallo run show` printed an empty reason).
    assert (d.attempt.state, d.attempt.reason_code) == (s.ATTEMPT_CANCELLED, reasons.CANCELLED_BY_MEMBER)
    assert [k for _, k in sim.sent].count("cancel") == 1


def test_terminal_observation_from_before_the_cancel_does_not_end_a_cancelling_run():
    sim = Sim()
    sim.run_until_observed()  # an observe is pending
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    sim.step()  # cancel sent while the observe is pending
    sim.result("observe", phase="running")
    sim.result("cancel")
    d = sim.step()
    assert d.end is None and [k for k, _ in d.commands] == ["observe"]


def test_cancel_after_success_keeps_the_fact():
    sim = Sim()
    sim.run_until_observed()
    sim.result("observe", phase="succeeded")
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    assert sim.step().end == (s.OUTCOME_SUCCEEDED, reasons.COMPLETED)


def test_cancel_during_retry_wait_ends_the_run():
    sim = Sim(max_attempts=3, backoff=100)
    sim.run_until_observed()
    sim.result("observe", phase="failed")
    assert sim.step().phase == s.PHASE_RETRY_WAIT
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    assert sim.step().end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BY_MEMBER)
