"""A simulated Run for the pure lifecycle tests (tests/unit/test_execution_core_lifecycle*.py):
it applies the lifecycle's decisions and feeds it command results and observations."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from execution_core.domain import lifecycle as lc
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

    def run_until_observed(self) -> lc.Decision:
        """Send the Attempt's prepare, then :meth:`prepared_until_observed`."""
        self.step()
        return self.prepared_until_observed()

    def prepared_until_observed(self) -> lc.Decision:
        """Answer the pending prepare and start, wait 10 s and take the step that sends
        the first observe; that step's decision."""
        self.result("prepare")
        self.step()
        self.result("start")
        self.wait(10)
        return self.step()

    def notice(self) -> None:
        """The Site's native end notice arrives now (ADR 0016), as the store records it:
        after the Attempt's newest command."""
        newest = max((c.seq for c in self.attempt.commands), default=0)
        self.attempt = replace(self.attempt, native_end_noticed_after_seq=newest)
