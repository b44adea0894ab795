"""Lost Attempts, observation confidence and native waits in the pure lifecycle
(seed 002 §9.2, §9.3, §18; docs/runs.md, Lost Attempts)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from execution_core.domain import lifecycle as lc
from execution_core.domain import reasons
from execution_core.domain import reconciliation as rec
from execution_core.domain import states as s
from tests.unit.execution_core_lifecycle_sim import T0, Sim

LOST = lc.Timing(
    observe_interval=10,
    result_recheck=5,
    stale_after=60,
    dispatch_timeout=600,
    first_observe=1,
    lost_after=100,
    lost_observe_max=16,
)
UNKNOWN = {"outcome": "refused", "code": "attempt-not-prepared"}


def started(**kw) -> Sim:
    """A Sim whose Attempt's start the Site accepted and whose first observe is sent."""
    sim = Sim(timing=LOST, **kw)
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start", phase="queued", native_state="PENDING")
    sim.step()
    sim.wait(1)
    assert [k for k, _ in sim.step().commands] == ["observe"]
    return sim


def ask_until_sent(sim: Sim, limit: float = 200) -> float:
    """Advance one second at a time until an observe is sent; the seconds waited."""
    waited = 0.0
    while waited < limit:
        d = sim.step()
        if d.end is not None or d.phase == s.PHASE_RETRY_WAIT:
            return -1
        if any(k == "observe" for k, _ in d.commands):
            return waited
        sim.wait(1)
        waited += 1
    raise AssertionError("no observe sent")


def test_an_unknown_attempt_is_asked_with_back_off_then_ends_lost():
    sim = started()
    sim.result("observe", **UNKNOWN)
    d = sim.step()
    assert d.end is None and d.confidence == s.CONFIDENCE_UNCERTAIN
    assert d.waiting_reason == reasons.WAIT_ATTEMPT_UNKNOWN_AT_SITE
    waits = []
    while True:
        waited = ask_until_sent(sim)
        if waited < 0:
            break
        waits.append(waited)
        sim.result("observe", **UNKNOWN)
    # 2, 4, 8, 16 (the cap), 16 … after each answer, until 100 s after the first.
    assert waits[:5] == [2, 4, 8, 16, 16]
    assert (sim.now - T0).total_seconds() - 1 == pytest.approx(101, abs=1)
    d = sim.last
    assert d.end == (s.OUTCOME_LOST, reasons.LOST_AT_SITE)
    assert d.attempt.state == s.ATTEMPT_LOST and d.attempt.ended
    assert d.waiting_reason == ""


def test_a_known_answer_ends_the_streak_and_restarts_the_period():
    sim = started()
    sim.result("observe", **UNKNOWN)
    sim.wait(90)
    sim.step()
    sim.result("observe", phase="running", native_state="RUNNING")
    d = sim.step()
    assert d.end is None and d.waiting_reason == "" and d.confidence == s.CONFIDENCE_CURRENT
    sim.wait(10)
    sim.step()
    sim.result("observe", **UNKNOWN)
    sim.wait(50)  # 150 s after the first unknown answer, 50 after this streak began
    assert sim.step().end is None


@pytest.mark.parametrize(
    ("retry_on_lost", "max_attempts", "expected"),
    [
        (False, 1, "ended"),
        (False, 3, "ended"),  # a lost Attempt is not retried without retry.onLost
        (True, 1, "ended"),  # no Attempt left
        (True, 3, "retry"),
    ],
)
def test_lost_is_retried_only_when_the_action_opts_in(retry_on_lost, max_attempts, expected):
    sim = started(max_attempts=max_attempts)
    sim.run = replace(sim.run, retry_on_lost=retry_on_lost)
    sim.result("observe", **UNKNOWN)
    sim.wait(101)
    d = sim.step()
    if expected == "ended":
        assert d.end == (s.OUTCOME_LOST, reasons.LOST_AT_SITE)
    else:
        assert d.end is None and d.phase == s.PHASE_RETRY_WAIT
        sim.wait(1)
        assert sim.step().new_attempt_number == 2


def test_an_operators_mark_lost_ends_it_at_once():
    sim = started(max_attempts=3)
    sim.result("observe", **UNKNOWN)
    sim.attempt = replace(sim.attempt, lost_marked=True)
    d = sim.step()
    assert d.end == (s.OUTCOME_LOST, reasons.MARKED_LOST)
    assert d.attempt.state == s.ATTEMPT_LOST and d.attempt.reason_code == reasons.MARKED_LOST


def test_an_uncertain_start_stopped_by_the_deadline_and_unknown_to_the_site_ends_lost():
    sim = Sim(timing=LOST, max_attempts=3)
    sim.step()
    sim.result("prepare")
    sim.step()  # start sent, never answered
    sim.wait(600)
    assert [k for k, _ in sim.step().commands] == ["cancel"]
    sim.result("cancel")
    assert [k for k, _ in sim.step().commands] == ["observe"]
    sim.result("observe", **UNKNOWN)
    sim.wait(101)
    assert sim.step().end == (s.OUTCOME_LOST, reasons.LOST_AT_SITE)  # and no retry


def test_a_terminal_observation_before_the_unknown_answers_stands():
    sim = started()
    sim.result("observe", phase="succeeded", native_state="COMPLETED", exit_code=0)
    assert sim.step().end == (s.OUTCOME_SUCCEEDED, reasons.COMPLETED)


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        ("wall-time-exceeded", s.OUTCOME_TIMED_OUT),
        ("timed-out", s.OUTCOME_TIMED_OUT),
        ("stage-failed", s.OUTCOME_FAILED),
    ],
)
def test_a_failure_at_the_wall_time_ends_timed_out(code, outcome):
    sim = started()
    sim.result("observe", phase="failed", failure={"stage": "compute", "code": code})
    assert sim.step().end == (outcome, code)


# ------------------------------------------------------------------ confidence


def _pending_observe(sim: Sim) -> None:
    sim.result("observe", phase="running", native_state="RUNNING")
    sim.wait(10)
    assert [k for k, _ in sim.step().commands] == ["observe"]


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("answered just now", s.CONFIDENCE_CURRENT),
        ("observe pending briefly", s.CONFIDENCE_CURRENT),
        ("observe pending one cycle", s.CONFIDENCE_STALE),
        ("observe deferred by the Site", s.CONFIDENCE_UNCERTAIN),
        ("the Site does not know it", s.CONFIDENCE_UNCERTAIN),
        ("the Site answered stale", s.CONFIDENCE_STALE),
        ("phase unknown", s.CONFIDENCE_UNCERTAIN),
    ],
)
def test_confidence_says_what_the_site_can_vouch_for(scenario, expected):
    sim = started()
    if scenario == "answered just now":
        sim.result("observe", phase="running")
    elif scenario == "observe pending briefly":
        _pending_observe(sim)
        sim.wait(3)
    elif scenario == "observe pending one cycle":
        _pending_observe(sim)
        sim.wait(10)  # observe_interval: one cycle without an answer
    elif scenario == "observe deferred by the Site":
        _pending_observe(sim)
        sim.attempt = replace(sim.attempt, deferred_command_id=sim.pending("observe").command_id)
    elif scenario == "the Site does not know it":
        sim.result("observe", **UNKNOWN)
    elif scenario == "the Site answered stale":
        sim.result("observe", phase="running", confidence="stale")
    elif scenario == "phase unknown":
        sim.result("observe", phase="unknown")
    assert sim.step().confidence == expected


def test_a_pending_observe_wakes_the_run_when_it_turns_stale():
    slow = replace(LOST, result_recheck=30)
    sim = started()
    sim.timing = slow
    sim.result("observe", phase="running", native_state="RUNNING")
    sim.wait(10)
    sent = sim.step()
    assert [k for k, _ in sent.commands] == ["observe"]
    assert sent.wake_at == sim.now + timedelta(seconds=10)  # one cycle, not the 30 s recheck
    sim.timing = LOST
    d = sim.step()
    assert d.wake_at == sim.now + timedelta(seconds=5)  # result_recheck, sooner than stale
    slow = replace(LOST, result_recheck=30)
    d = lc.decide(sim.run, sim.attempt, sim.now, slow)
    assert d.wake_at == sim.pending("observe").created_at + timedelta(seconds=10)


def test_native_wait_and_stage_come_from_the_chosen_observation():
    sim = started()
    sim.result(
        "observe", phase="queued", native_state="PENDING", native_wait="slurm-resources",
        native_stage="compute",
    )
    d = sim.step()
    assert (d.native_state, d.native_wait, d.native_stage) == ("PENDING", "slurm-resources", "compute")
    sim.wait(10)
    sim.step()
    sim.result("observe", phase="running", native_state="RUNNING", native_stage="compute")
    d = sim.step()
    assert (d.native_wait, d.native_stage) == ("", "compute")


# ------------------------------------------------------------------ mark-lost verdict


def _verdict(**kw) -> rec.MarkLostVerdict:
    start = lc.CommandFact("c2", "start", 1, 2, T0, outcome="succeeded", result_at=T0)
    args = {
        "phase": s.PHASE_RUNNING,
        "attempt_number": 1,
        "attempt_state": s.ATTEMPT_ACTIVE,
        "start": start,
        "already_marked": False,
        "silence_": rec.Silence(),
        "confidence_": s.CONFIDENCE_CURRENT,
        "lost_after": 900,
        "will_retry": False,
        "now": T0 + timedelta(seconds=60),
    }
    args.update(kw)
    return rec.mark_lost_verdict(**args)


@pytest.mark.parametrize(
    ("change", "eligible", "says"),
    [
        ({}, False, "still observes"),
        ({"phase": s.PHASE_TERMINAL}, False, "already ended"),
        ({"attempt_number": None, "attempt_state": None}, False, "no active Attempt"),
        ({"attempt_state": s.ATTEMPT_FAILED}, False, "no active Attempt"),
        ({"start": None}, False, "never sent"),
        ({"already_marked": True}, False, "already marked"),
        ({"confidence_": s.CONFIDENCE_STALE}, True, "observation is stale"),
        ({"confidence_": s.CONFIDENCE_UNCERTAIN}, True, "cannot vouch"),
        (
            {"silence_": rec.Silence(since=T0, answers=3, last_at=T0 + timedelta(seconds=50))},
            True,
            "would be ended lost in 840 s",
        ),
        ({"confidence_": s.CONFIDENCE_STALE, "will_retry": True}, True, "a new Attempt follows"),
    ],
)
def test_mark_lost_is_allowed_only_while_the_site_cannot_vouch(change, eligible, says):
    verdict = _verdict(**change)
    assert verdict.eligible is eligible and says in verdict.explanation
    # An allowed mark-lost says plainly that the native work is not stopped by it.
    assert ("is not stopped" in verdict.explanation) is eligible


def test_a_cancel_the_site_does_not_know_is_sent_again_until_a_runtime_knows_it():
    sim = started()
    sim.result("observe", phase="running", native_state="RUNNING")
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    assert [k for k, _ in sim.step().commands] == ["cancel"]
    sim.result("cancel", **UNKNOWN)
    d = sim.step()
    # Not done: the Run keeps cancelling, visibly waiting, and asks again with back-off.
    assert d.end is None and d.phase == s.PHASE_CANCELLING
    assert d.waiting_reason == reasons.WAIT_ATTEMPT_UNKNOWN_AT_SITE
    assert d.confidence == s.CONFIDENCE_UNCERTAIN
    assert not any(k == "observe" for k, _ in d.commands)
    sent = []
    for _ in range(30):
        sim.wait(1)
        kinds = [k for k, _ in sim.step().commands]
        if kinds:
            sent.append(kinds)
            sim.result("cancel", **UNKNOWN)
    assert sent and all(k == ["cancel"] for k in sent)
    # A Runtime that knows the Attempt accepts it: the native end is observed at once.
    sim.wait(20)
    assert [k for k, _ in sim.step().commands] == ["cancel"]
    sim.result("cancel")
    d = sim.step()
    assert [k for k, _ in d.commands] == ["observe"] and d.waiting_reason == ""
    sim.result("observe", phase="cancelled", native_state="CANCELLED")
    d = sim.step()
    assert d.end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BY_MEMBER)


def test_a_cancel_no_runtime_ever_knows_ends_the_attempt_lost():
    sim = started()
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    sim.step()
    sim.result("cancel", **UNKNOWN)
    for _ in range(200):
        sim.wait(1)
        d = sim.step()
        if d.end is not None:
            break
        if any(k == "cancel" for k, _ in d.commands):
            sim.result("cancel", **UNKNOWN)
    assert d.end == (s.OUTCOME_LOST, reasons.LOST_AT_SITE)
    assert d.attempt.state == s.ATTEMPT_LOST
