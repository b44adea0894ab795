"""The pure Run lifecycle (seed 004 §4D, §4E, §7C; seed 002 §9.2, §9.3)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from execution_core.domain import lifecycle as lc
from execution_core.domain import reasons
from execution_core.domain import states as s

T0 = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
TIMING = lc.Timing(observe_interval=10, result_recheck=5, stale_after=60, dispatch_timeout=600)
MATERIAL = {"project": "demo", "spec": {"command": ["true"]}, "material_digest": "d" * 64}


class Sim:
    """Applies decisions like the supervisor does, so rules are tested as sequences."""

    def __init__(
        self,
        family: str = s.QUEUED_BATCH,
        max_attempts: int = 1,
        backoff: float = 0.0,
        timing: lc.Timing = TIMING,
    ):
        self.now = T0
        self.timing = timing
        self.run = lc.RunView(
            run_id="r1",
            family=family,
            desired_state=s.DESIRED_RUN,
            phase=s.PHASE_PREPARING,
            max_attempts=max_attempts,
            backoff_seconds=backoff,
            material=MATERIAL,
        )
        self.attempt: lc.AttemptView | None = lc.AttemptView(
            attempt_id="a1",
            number=1,
            state=s.ATTEMPT_PENDING,
            created_at=T0,
            dispatch_deadline=T0 + timedelta(seconds=timing.dispatch_timeout),
        )
        self.seq = 0
        self.sent: list[tuple[int, str]] = []  # (attempt number, kind)
        self.last: lc.Decision | None = None

    def step(self) -> lc.Decision:
        d = lc.decide(self.run, self.attempt, self.now, self.timing)
        self.last = d
        if d.new_attempt_number is not None:
            self.attempt = lc.AttemptView(
                attempt_id=f"a{d.new_attempt_number}",
                number=d.new_attempt_number,
                state=s.ATTEMPT_PREPARING,
                created_at=self.now,
                dispatch_deadline=d.new_attempt_deadline,
            )
        elif d.attempt is not None and self.attempt is not None:
            self.attempt = replace(self.attempt, state=d.attempt.state)
        cmds = list(self.attempt.commands) if self.attempt else []
        for kind, _payload in d.commands:
            self.seq += 1
            ordinal = 1 + sum(1 for c in cmds if c.kind == kind)
            cmds.append(lc.CommandFact(f"c{self.seq}", kind, ordinal, self.seq, self.now))
            self.sent.append((self.attempt.number, kind))
        if self.attempt is not None:
            self.attempt = replace(self.attempt, commands=tuple(cmds))
        phase = s.PHASE_TERMINAL if d.end else d.phase
        self.run = replace(
            self.run,
            phase=phase,
            desired_state=d.desired_state,
            cancel_origin=d.cancel_origin,
            retry_at=d.retry_at,
            started=self.run.started or d.emit_started,
        )
        return d

    def pending(self, kind: str) -> lc.CommandFact:
        return next(c for c in self.attempt.commands if c.kind == kind and c.outcome is None)

    def result(
        self, kind: str, outcome: str = "succeeded", code: str | None = None, **observation
    ) -> None:
        cmd = self.pending(kind)
        obs = observation or None
        done = replace(
            cmd,
            outcome=outcome,
            code=code,
            observation=obs,
            result_at=self.now,
            native_jobs=({"stage": "compute", "job_id": "42"},) if kind == "start" else (),
        )
        self.attempt = replace(
            self.attempt,
            commands=tuple(
                done if c.command_id == cmd.command_id else c for c in self.attempt.commands
            ),
        )

    def wait(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def notice(self) -> None:
        """The Site's native end notice arrives now (ADR 0016), as the store records it:
        after the Attempt's newest command."""
        newest = max((c.seq for c in self.attempt.commands), default=0)
        self.attempt = replace(self.attempt, native_end_noticed_after_seq=newest)


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
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start")
    sim.wait(10)
    sim.step()
    sim.result("observe", phase="running", native_state="RUNNING")
    sim.wait(10)
    sim.step()
    sim.result("observe", phase="queued", native_state="PENDING")
    d = sim.step()
    assert d.phase == s.PHASE_RUNNING and d.observation_phase == "running"


def test_unknown_observation_is_uncertain_not_a_failure():
    sim = Sim()
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start")
    sim.wait(10)
    sim.step()
    sim.result("observe", phase="unknown")
    d = sim.step()
    assert d.end is None and d.confidence == s.CONFIDENCE_UNCERTAIN


def test_definite_failure_retries_as_a_new_attempt_within_policy():
    sim = Sim(max_attempts=2, backoff=30)
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start")
    sim.wait(10)
    sim.step()
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
    sim.result("prepare")
    sim.step()
    sim.result("start")
    sim.wait(10)
    sim.step()
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
    for code in ("authorisation-refused", "member-consent-refused"):
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
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start")
    sim.wait(10)
    sim.step()  # an observe is pending
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    sim.step()  # cancel sent while the observe is pending
    sim.result("observe", phase="running")
    sim.result("cancel")
    d = sim.step()
    assert d.end is None and [k for k, _ in d.commands] == ["observe"]


def test_cancel_after_success_keeps_the_fact():
    sim = Sim()
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start")
    sim.wait(10)
    sim.step()
    sim.result("observe", phase="succeeded")
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    assert sim.step().end == (s.OUTCOME_SUCCEEDED, reasons.COMPLETED)


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


def test_cancel_during_retry_wait_ends_the_run():
    sim = Sim(max_attempts=3, backoff=100)
    sim.step()
    sim.result("prepare")
    sim.step()
    sim.result("start")
    sim.wait(10)
    sim.step()
    sim.result("observe", phase="failed")
    assert sim.step().phase == s.PHASE_RETRY_WAIT
    sim.run = replace(sim.run, desired_state=s.DESIRED_CANCEL, cancel_origin="member")
    assert sim.step().end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BY_MEMBER)


def test_run_without_attempt_creates_attempt_one_or_ends_when_cancelled():
    run = lc.RunView("r", s.QUEUED_BATCH, s.DESIRED_RUN, s.PHASE_PREPARING, 1, 0, MATERIAL)
    d = lc.decide(run, None, T0, TIMING)
    assert d.new_attempt_number == 1 and d.commands[0][0] == "prepare"
    d = lc.decide(replace(run, desired_state=s.DESIRED_CANCEL), None, T0, TIMING)
    assert d.end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BEFORE_START)


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


def test_an_observed_failure_no_attempt_can_cure_is_not_retried():
    # A local Attempt that waited for a slot is authorised only when it leaves the
    # queue (ADR 0015): a refusal then arrives as an observed failure.
    for code in ("authorisation-refused", "member-consent-refused", "repository-commit-missing"):
        sim = Sim(max_attempts=3)
        sim.step()
        sim.result("prepare")
        sim.step()
        sim.result("start")
        sim.wait(10)
        sim.step()
        sim.result("observe", phase="failed", failure={"code": code})
        assert sim.step().end == (s.OUTCOME_FAILED, code), code
