"""The pure Run lifecycle (seed 004 §4D, §4E, §7C; seed 002 §9.2, §9.3): each step
sent once, observations that never move an Attempt backwards, services, first Attempts."""

from __future__ import annotations

from dataclasses import replace

from execution_core.domain import lifecycle as lc
from execution_core.domain import reasons
from execution_core.domain import states as s
from tests.unit.execution_core_lifecycle_sim import MATERIAL, T0, TIMING, Sim


def test_queued_batch_whole_lifecycle_sends_each_step_once():
    sim = Sim()
    d = sim.step()
    assert d.commands[0][0] == "prepare" and d.commands[0][1]["deadline"] == "2026-11-29T11:10:00Z"
    assert sim.step().commands == []  # waiting for the prepare result: nothing is repeated
    sim.result("prepare")
    assert [k for k, _ in sim.step().commands] == ["start"]
    assert sim.step().commands == []
    sim.result("start", phase="queued", native_state="PENDING")
    d = sim.step()
    assert (
        d.emit_started and d.phase == s.PHASE_QUEUED and d.commands == []
    )  # observe waits its interval
    sim.wait(10)
    assert [k for k, _ in sim.step().commands] == ["observe"]
    sim.result("observe", phase="running", native_state="RUNNING")
    d = sim.step()
    assert (
        d.phase == s.PHASE_RUNNING
        and d.native_state == "RUNNING"
        and d.confidence == s.CONFIDENCE_CURRENT
    )
    assert not d.emit_started  # RunStarted once
    sim.wait(10)
    sim.step()
    sim.result(
        "observe", phase="succeeded", native_state="COMPLETED", exit_code=0, output_commit="c" * 40
    )
    d = sim.step()
    assert d.end == (s.OUTCOME_SUCCEEDED, reasons.COMPLETED)
    assert d.output_commit == "c" * 40 and d.exit == {"exit_code": 0}
    assert sim.sent == [(1, "prepare"), (1, "start"), (1, "observe"), (1, "observe")]
    assert lc.decide(sim.run, sim.attempt, sim.now, TIMING).commands == []  # terminal never moves


def test_late_lower_observation_never_moves_the_attempt_backwards():
    sim = Sim()
    sim.run_until_observed()
    sim.result("observe", phase="running", native_state="RUNNING")
    sim.wait(10)
    sim.step()
    sim.result("observe", phase="queued", native_state="PENDING")
    d = sim.step()
    assert d.phase == s.PHASE_RUNNING and d.observation_phase == "running"


def test_unknown_observation_is_uncertain_not_a_failure():
    sim = Sim()
    sim.run_until_observed()
    sim.result("observe", phase="unknown")
    d = sim.step()
    assert d.end is None and d.confidence == s.CONFIDENCE_UNCERTAIN


def test_reconciled_service_apply_observe_terminate():
    sim = Sim(family=s.RECONCILED_SERVICE, max_attempts=5)
    assert [k for k, _ in sim.step().commands] == ["apply"]
    sim.result("apply")
    d = sim.step()
    assert d.emit_started
    sim.wait(10)
    sim.step()
    sim.result("observe", phase="running", endpoint="https://svc.example/")
    d = sim.step()
    assert d.phase == s.PHASE_RUNNING and d.endpoint == "https://svc.example/"
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    assert [k for k, _ in sim.step().commands] == ["terminate"]
    sim.result("terminate")
    sim.step()
    sim.result("observe", phase="cancelled")
    assert sim.step().end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BY_MEMBER)


def test_run_without_attempt_creates_attempt_one_or_ends_when_cancelled():
    run = lc.RunView("r", s.QUEUED_BATCH, s.DESIRED_RUN, s.PHASE_PREPARING, 1, 0, MATERIAL)
    d = lc.decide(run, None, T0, TIMING)
    assert d.new_attempt_number == 1 and d.commands[0][0] == "prepare"
    d = lc.decide(replace(run, desired_state=s.DESIRED_CANCEL), None, T0, TIMING)
    assert d.end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BEFORE_START)
