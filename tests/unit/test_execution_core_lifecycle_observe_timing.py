"""When the pure Run lifecycle observes (seed 002 §9.3): soon after start, backing off
to the interval, at once after a noticed native end — and never in a storm."""

from __future__ import annotations

from execution_core.domain import reasons
from execution_core.domain import states as s
from tests.unit.execution_core_lifecycle_sim import Sim


def test_observes_start_soon_and_back_off_to_the_interval():
    """Issue 8: the first observe comes first_observe after the start result, then each
    wait doubles up to observe_interval (a short Run's end is seen within a second)."""
    sim = Sim()
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start", phase="queued", native_state="PENDING")
    waits = []
    for _ in range(6):
        d = sim.step()
        assert d.commands == []
        waits.append((d.wake_at - sim.now).total_seconds())
        sim.wait(waits[-1] - 0.001)
        assert sim.step().commands == []  # not a moment early
        sim.wait(0.001)
        assert [k for k, _ in sim.step().commands] == ["observe"]
        sim.result("observe", phase="running", native_state="RUNNING")
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]  # TIMING: first_observe 1, interval 10


def _running_with_one_observe_sent(sim: Sim) -> None:
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start", phase="queued", native_state="PENDING")
    sim.wait(1)
    assert [k for k, _ in sim.step().commands] == ["observe"]
    sim.result("observe", phase="running", native_state="RUNNING")


def test_a_noticed_native_end_makes_the_next_observe_due_at_once():
    """ADR 0016: the Site's notice is a hint: one observe at once, and only its result
    (never the notice) ends the Run."""
    sim = Sim()
    _running_with_one_observe_sent(sim)
    sim.wait(0.5)  # the next observe would be due 2 s after the last result
    assert sim.step().commands == []
    sim.notice()
    d = sim.step()
    assert [k for k, _ in d.commands] == ["observe"] and d.end is None
    assert sim.step().commands == []  # one observe for one notice, not one per wake-up
    sim.result("observe", phase="running", native_state="RUNNING")  # a stale answer
    d = sim.step()  # back to the back-off: the notice was answered by an observe after it
    assert d.commands == [] and (d.wake_at - sim.now).total_seconds() == 4.0
    sim.wait(4)
    assert [k for k, _ in sim.step().commands] == ["observe"]
    sim.result("observe", phase="succeeded", native_state="COMPLETED", exit={"exit_code": 0})
    assert sim.step().end == (s.OUTCOME_SUCCEEDED, reasons.COMPLETED)


def test_a_notice_during_an_outstanding_observe_is_answered_by_a_later_observe():
    # The observe in flight may have been handled before the end: when its result
    # comes, one more observe is sent at once.
    sim = Sim()
    _running_with_one_observe_sent(sim)
    sim.wait(2)
    assert [k for k, _ in sim.step().commands] == ["observe"]
    sim.wait(0.1)
    sim.notice()
    assert sim.step().commands == []  # one outstanding observe at a time
    sim.wait(0.1)
    sim.result("observe", phase="running", native_state="RUNNING")
    assert [k for k, _ in sim.step().commands] == ["observe"]


def test_a_notice_before_the_start_result_is_answered_right_after_it():
    sim = Sim()
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.notice()
    assert sim.step().commands == []  # the start's result is awaited first
    sim.result("start", phase="running", native_state="RUNNING")
    assert [k for k, _ in sim.step().commands] == ["observe"]  # not 1 s later


def test_a_clock_stepping_back_after_a_notice_sends_no_observe_storm():
    # Which observes answer a notice is told by command order, not by clock readings.
    sim = Sim()
    _running_with_one_observe_sent(sim)
    sim.notice()
    assert [k for k, _ in sim.step().commands] == ["observe"]
    sim.wait(-60)  # the database clock steps back a minute
    sim.result("observe", phase="running", native_state="RUNNING")
    for _ in range(5):
        assert sim.step().commands == []
