"""The Run lifecycle as a pure decision (seed 004 §4D, §4E, §7C; seed 002 §9.2, §9.3).

The Run Supervisor loads a Run, its current Attempt and that Attempt's Site
commands (with any recorded results), calls :func:`decide` with PostgreSQL's
``now``, and persists the returned :class:`Decision` in one fenced transaction.
Nothing here performs I/O, so every rule is testable on its own.

Rules kept here:

- one command at a time per Attempt, in family order: ``prepare → start →
  observe…`` (queued-batch) or ``apply → observe…`` (reconciled-service);
- a command is decided once: the supervisor never sends a second
  ``prepare``/``start``/``apply``/``cancel``/``terminate`` for an Attempt;
- an uncertain native start (start sent, no result) is never repeated; a
  cancellation or the dispatch deadline stops it under the same Attempt identity;
- terminal native evidence comes only from ``observe`` results, and after a
  cancel/terminate only from an ``observe`` sent after that command;
- a later, lower-ranked observation never moves an Attempt backwards;
- a retry is a new Attempt, only after a definite failure and within the
  Workload's retry policy; a lost Attempt is retried only when the action opts in
  (``retry.onLost``);
- an Attempt the Site answers it does not know is asked about with back-off and
  ends ``lost`` after the reconciliation period, or sooner by an operator's
  ``mark-lost`` (:mod:`~execution_core.domain.reconciliation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from execution_core.domain import observations, reasons
from execution_core.domain import reconciliation as rec
from execution_core.domain import states as s


@dataclass(frozen=True)
class CommandFact:
    """A Site command of an Attempt and its recorded result (None while pending).

    ``seq`` orders the Attempt's commands by creation; ``result_at`` is the
    PostgreSQL time the result was applied.
    """

    command_id: str
    kind: str
    ordinal: int
    seq: int
    created_at: datetime
    outcome: str | None = None  # succeeded | refused | None
    code: str | None = None
    native_jobs: tuple[dict[str, Any], ...] = ()
    observation: dict[str, Any] | None = None
    result_at: datetime | None = None


@dataclass(frozen=True)
class AttemptView:
    """The current Attempt with every command sent for it."""

    attempt_id: str
    number: int
    state: str
    created_at: datetime
    dispatch_deadline: datetime
    commands: tuple[CommandFact, ...] = ()
    # ADR 0016: the Site noticed its end when the newest command had this seq.
    native_end_noticed_after_seq: int | None = None
    lost_marked: bool = False  # an operator's mark-lost (ReconcileRun)
    deferred_command_id: str | None = None  # the pending command the Site reported deferred


@dataclass(frozen=True)
class RunView:
    """What the decision needs of the Run.

    ``material`` is the prepare/apply payload without its deadline
    (docs/site-commands.md); ``cancel_origin`` is ``member`` or ``deadline``.
    """

    run_id: str
    family: str
    desired_state: str
    phase: str
    max_attempts: int
    backoff_seconds: float
    material: dict[str, Any]
    cancel_origin: str = ""
    retry_at: datetime | None = None
    started: bool = False
    retry_on_lost: bool = False  # the action's retry.onLost
    site_draining: bool = False  # an operator drains the Run's target Site: no new Attempt


@dataclass(frozen=True)
class Timing:
    """Supervisor timing, all in seconds (configurable; tests use short values)."""

    observe_interval: float = 30.0  # between two observe commands of an active Attempt
    first_observe: float = 1.0  # start result → first observe; doubles up to observe_interval
    result_recheck: float = 30.0  # how often to look again while a result is awaited
    stale_after: float = 120.0  # an observation older than this is "stale"
    dispatch_timeout: float = 3600.0  # from Attempt creation to the dispatch deadline
    lost_after: float = 900.0  # the Site does not know a started Attempt this long → lost
    lost_observe_max: float = 120.0  # the longest wait between two asks meanwhile


@dataclass
class AttemptUpdate:
    """New values for the current Attempt's row."""

    state: str
    native_jobs: list[dict[str, Any]] = field(default_factory=list)
    observation_phase: str = ""
    native_state: str = ""
    exit: dict[str, Any] = field(default_factory=dict)
    reason_code: str = ""
    started: bool = False
    ended: bool = False


@dataclass
class Decision:
    """What the supervisor must persist, atomically, for one step.

    ``commands`` are (kind, payload) for the current Attempt — or for the new
    Attempt when ``new_attempt_number`` is set. ``end`` is (outcome,
    reason_code) when the Run becomes terminal (with RunCompleted in the same
    transaction). ``wake_at`` is when to look again if no result arrives first.
    """

    phase: str
    desired_state: str
    cancel_origin: str
    attempt: AttemptUpdate | None
    commands: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    new_attempt_number: int | None = None
    new_attempt_deadline: datetime | None = None
    observation_phase: str = ""
    native_state: str = ""
    confidence: str = s.CONFIDENCE_NONE
    exit: dict[str, Any] = field(default_factory=dict)
    output_commit: str = ""
    endpoint: str = ""
    end: tuple[str, str] | None = None
    emit_started: bool = False
    retry_at: datetime | None = None
    wake_at: datetime | None = None
    native_wait: str = ""  # native-wait code of the chosen observation
    native_stage: str = ""  # the stage its native state belongs to
    # Execution Core's own waiting code ("" = none of its own; None = leave as it is).
    waiting_reason: str | None = None


def kinds(family: str) -> tuple[str, str, str]:
    """(prepare kind, native start kind, stop kind) of a workload family."""
    if family == s.QUEUED_BATCH:
        return "prepare", "start", "cancel"
    return "apply", "apply", "terminate"


def prepare_payload(material: dict[str, Any], deadline: datetime) -> dict[str, Any]:
    """The prepare/apply payload: the saved material plus the dispatch deadline (UTC, ISO 8601)."""
    return {**material, "deadline": iso_utc(deadline)}


def iso_utc(t: datetime) -> str:
    """``t`` as ``YYYY-MM-DDTHH:MM:SSZ``; a naive datetime is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _first(cmds: tuple[CommandFact, ...], kind: str) -> CommandFact | None:
    for c in cmds:
        if c.kind == kind:
            return c
    return None


def decide(run: RunView, attempt: AttemptView | None, now: datetime, t: Timing) -> Decision:
    """Decide the Run's next step from its saved facts and PostgreSQL's ``now``.

    Returns a :class:`Decision`; when nothing changes it still names ``wake_at``.
    A Run that is already terminal yields a Decision with ``phase="terminal"``
    and no commands (a terminal Run never moves).
    """
    if run.phase == s.PHASE_TERMINAL:
        return Decision(
            phase=s.PHASE_TERMINAL,
            desired_state=run.desired_state,
            cancel_origin=run.cancel_origin,
            attempt=None,
        )
    if attempt is None:
        return _without_attempt(run, now, t)

    prep_kind, start_kind, stop_kind = kinds(run.family)
    cmds = attempt.commands
    prep, start, stop = _first(cmds, prep_kind), _first(cmds, start_kind), _first(cmds, stop_kind)
    obs = observations.merge(attempt.commands, stop)
    d = Decision(
        phase=run.phase,
        desired_state=run.desired_state,
        cancel_origin=run.cancel_origin,
        attempt=AttemptUpdate(
            state=attempt.state,
            native_jobs=obs.jobs,
            observation_phase=obs.phase,
            native_state=obs.native_state,
        ),
        observation_phase=obs.phase,
        native_state=obs.native_state,
        confidence=rec.confidence(
            cmds,
            start=start,
            phase=obs.phase,
            deferred_command_id=attempt.deferred_command_id,
            now=now,
            stale_after=t.stale_after,
            observe_interval=t.observe_interval,
        ),
        output_commit=obs.output_commit,
        endpoint=obs.endpoint,
        native_wait=obs.native_wait,
        native_stage=obs.native_stage,
        waiting_reason="",
    )
    assert d.attempt is not None

    if attempt.state in s.ATTEMPT_TERMINAL:
        return _after_terminal_attempt(run, attempt, d, now, t)

    # 1. Definite facts first: refusals and terminal observations end the Attempt.
    if prep is not None and prep.outcome == "refused":
        return _attempt_ended(
            run,
            attempt,
            d,
            s.ATTEMPT_REFUSED,
            prep.code or reasons.NATIVE_FAILURE,
            permanent=True,
            now=now,
            t=t,
        )
    if start is not None and start.outcome == "refused":
        code = start.code or reasons.NATIVE_FAILURE
        return _attempt_ended(
            run,
            attempt,
            d,
            s.ATTEMPT_REFUSED,
            code,
            permanent=code in reasons.PERMANENT_SITE_REFUSALS,
            now=now,
            t=t,
        )
    if obs.terminal is not None:
        d.exit = observations.exit_facts(obs.terminal)
        d.attempt.exit = d.exit
        phase = obs.terminal["phase"]
        if phase == s.OBS_SUCCEEDED:
            return _attempt_ended(
                run,
                attempt,
                d,
                s.ATTEMPT_SUCCEEDED,
                reasons.COMPLETED,
                permanent=True,
                now=now,
                t=t,
            )
        if phase == s.OBS_CANCELLED:
            return _attempt_ended(
                run, attempt, d, s.ATTEMPT_CANCELLED, "", permanent=True, now=now, t=t
            )
        code = (obs.terminal.get("failure") or {}).get("code") or reasons.NATIVE_FAILURE
        return _attempt_ended(
            run,
            attempt,
            d,
            s.ATTEMPT_FAILED,
            code,
            permanent=code in reasons.PERMANENT_FAILURES,
            now=now,
            t=t,
            outcome=s.OUTCOME_TIMED_OUT if code in reasons.TIMED_OUT_FAILURES else s.OUTCOME_FAILED,
        )

    # 1b. Lost Attempts: the Site does not know an Attempt whose start was sent.
    quiet = rec.Silence() if start is None else rec.silence(cmds, after_seq=start.seq)
    if start is not None and attempt.lost_marked:
        return _attempt_lost(run, attempt, d, reasons.MARKED_LOST, now)
    lost_at = quiet.lost_at(t.lost_after)
    if lost_at is not None and now >= lost_at:
        return _attempt_lost(run, attempt, d, reasons.LOST_AT_SITE, now)
    if lost_at is not None:
        d.waiting_reason = reasons.WAIT_ATTEMPT_UNKNOWN_AT_SITE

    start_accepted = start is not None and start.outcome == "succeeded"
    if start_accepted:
        d.attempt.started = True
        if not run.started:
            d.emit_started = True

    # 2. The dispatch deadline: a native start not accepted in time ends the Run.
    if (
        run.desired_state == s.DESIRED_RUN
        and not start_accepted
        and now >= attempt.dispatch_deadline
    ):
        if start is None:
            return _end_without_native_work(
                d, prep, stop, stop_kind, s.OUTCOME_FAILED, reasons.DISPATCH_DEADLINE_PASSED, now
            )
        # The start is uncertain: stop it under the same Attempt identity, then observe.
        d.desired_state = s.DESIRED_CANCEL
        d.cancel_origin = "deadline"

    # 3. Cancellation (seed 004 §7C).
    if d.desired_state == s.DESIRED_CANCEL:
        reason = (
            reasons.DISPATCH_DEADLINE_PASSED
            if d.cancel_origin == "deadline"
            else reasons.CANCELLED_BY_MEMBER
        )
        outcome = s.OUTCOME_FAILED if d.cancel_origin == "deadline" else s.OUTCOME_CANCELLED
        if start is None:
            # Never started: no start will ever be sent (fenced here); a prepared
            # workspace is cleaned up by a stop command.
            code = reasons.CANCELLED_BEFORE_START if d.cancel_origin != "deadline" else reason
            return _end_without_native_work(d, prep, stop, stop_kind, outcome, code, now)
        d.phase = s.PHASE_CANCELLING
        d.attempt.state = s.ATTEMPT_CANCELLING
        if stop is None:
            d.commands.append((stop_kind, {"reason": reason}))
            d.wake_at = now + timedelta(seconds=t.result_recheck)
            return d
        if stop.outcome is None:
            d.wake_at = now + timedelta(seconds=t.result_recheck)
            return d
        return _observe_loop(attempt, d, now, t, after=stop, quiet=quiet)

    # 4. The normal path.
    if prep is None:
        d.commands.append((prep_kind, prepare_payload(run.material, attempt.dispatch_deadline)))
        d.phase = s.PHASE_PREPARING
        d.attempt.state = s.ATTEMPT_PREPARING
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline)
        return d
    if prep.outcome is None:
        d.phase = s.PHASE_PREPARING
        d.attempt.state = s.ATTEMPT_PREPARING
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline)
        return d
    if start is None:
        d.commands.append((start_kind, {}))
        d.phase = s.PHASE_STARTING
        d.attempt.state = s.ATTEMPT_STARTING
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline)
        return d
    if start.outcome is None:
        d.phase = s.PHASE_STARTING
        d.attempt.state = s.ATTEMPT_STARTING
        d.wake_at = min(now + timedelta(seconds=t.result_recheck), attempt.dispatch_deadline)
        return d
    d.attempt.state = s.ATTEMPT_ACTIVE
    if obs.phase == s.OBS_RUNNING:
        d.phase = s.PHASE_RUNNING
    elif obs.phase == s.OBS_QUEUED or run.family == s.QUEUED_BATCH:
        d.phase = s.PHASE_QUEUED
    else:
        d.phase = s.PHASE_STARTING
    return _observe_loop(attempt, d, now, t, after=start, quiet=quiet)


def _observe_loop(
    attempt: AttemptView,
    d: Decision,
    now: datetime,
    t: Timing,
    *,
    after: CommandFact,
    quiet: rec.Silence,
) -> Decision:
    """Send the next observe when due, one outstanding at a time.

    The n-th observe after ``after`` (n = 0, 1, …) is due ``min(observe_interval,
    first_observe · 2ⁿ)`` seconds after the previous result (1, 3, 7, 15, 31 s … with
    the defaults): a Run's end is seen about as late again as its length, at least
    ``first_observe``, at most ``observe_interval`` (issue 8: every end was seen a whole
    interval after the start and held its admission slot that long); a long Run costs
    about log₂(observe_interval / first_observe) more observes in all. After a stop
    result the first observe is due at once (ADR 0012), and so is the first after the
    Site noticed the native end (ADR 0016). While the Site answers that it does not know
    the Attempt, the n-th ask waits ``min(lost_observe_max, first_observe · 2ⁿ)`` after
    the last answer, and the Run wakes by the end of the reconciliation period at the
    latest. An unanswered observe wakes the Run when it turns the confidence stale.
    """
    observes = [c for c in attempt.commands if c.kind == "observe" and c.seq > after.seq]
    pending = [c for c in observes if c.outcome is None]
    if pending:
        d.wake_at = now + timedelta(seconds=t.result_recheck)
        stale_at = rec.stale_check_at(
            attempt.commands, now=now, stale_after=t.stale_after, observe_interval=t.observe_interval
        )
        if stale_at is not None:
            d.wake_at = min(d.wake_at, stale_at)
        return d
    last = max((c.result_at for c in observes if c.result_at), default=None)
    noticed_after = attempt.native_end_noticed_after_seq
    lost_at = quiet.lost_at(t.lost_after)
    if lost_at is not None:
        due = min(quiet.next_ask(t.first_observe, t.lost_observe_max) or now, lost_at)
    elif last is None and after.kind in ("cancel", "terminate"):
        due = now  # after a stop result the native state is observed at once
    elif noticed_after is not None and not any(c.seq > noticed_after for c in observes):
        # The Site noticed the native end (ADR 0016): observe at once, once. An observe
        # sent before the notice may have seen the work still running, so only one
        # sent after it counts — by command order, never by clock readings.
        due = now
    else:
        base = last or after.result_at or now
        step = min(t.observe_interval, t.first_observe * 2 ** min(len(observes), 32))
        due = base + timedelta(seconds=step)
    if now >= due:
        d.commands.append(("observe", {}))
        # Look again when it turns stale without an answer, if that comes first.
        d.wake_at = now + timedelta(seconds=min(t.result_recheck, t.stale_after, t.observe_interval))
    else:
        d.wake_at = due
    return d


def _end_without_native_work(
    d: Decision,
    prep: CommandFact | None,
    stop: CommandFact | None,
    stop_kind: str,
    outcome: str,
    code: str,
    now: datetime,
) -> Decision:
    """End a Run whose current Attempt never started native work."""
    assert d.attempt is not None
    if prep is not None and stop is None and stop_kind == "cancel":
        d.commands.append(("cancel", {"reason": code}))  # clean up what prepare staged
    d.attempt.state = s.ATTEMPT_CANCELLED if outcome == s.OUTCOME_CANCELLED else s.ATTEMPT_FAILED
    d.attempt.reason_code = code
    d.attempt.ended = True
    d.phase = s.PHASE_TERMINAL
    d.end = (outcome, code)
    return d


def _attempt_ended(
    run: RunView,
    attempt: AttemptView,
    d: Decision,
    state: str,
    code: str,
    *,
    permanent: bool,
    now: datetime,
    t: Timing,
    outcome: str = s.OUTCOME_FAILED,
) -> Decision:
    """The Attempt has a definite end; decide the Run: end (a failure as ``outcome``), or
    retry as a new Attempt."""
    assert d.attempt is not None
    d.attempt.state = state
    d.attempt.reason_code = code
    d.attempt.ended = True
    cancelling = d.desired_state == s.DESIRED_CANCEL
    if state == s.ATTEMPT_SUCCEEDED:
        return _end(d, s.OUTCOME_SUCCEEDED, reasons.COMPLETED)
    if cancelling:
        code = reasons.DISPATCH_DEADLINE_PASSED if d.cancel_origin == "deadline" else reasons.CANCELLED_BY_MEMBER
        if not d.attempt.reason_code:  # the Site reported "cancelled": say why, as the Run does
            d.attempt.reason_code = code
        return _end(d, s.OUTCOME_FAILED if d.cancel_origin == "deadline" else s.OUTCOME_CANCELLED, code)
    if state == s.ATTEMPT_CANCELLED:
        d.attempt.reason_code = "cancelled-at-site"
        return _end(d, s.OUTCOME_CANCELLED, "cancelled-at-site")
    if not permanent and attempt.number < run.max_attempts:
        d.phase = s.PHASE_RETRY_WAIT
        d.retry_at = now + timedelta(seconds=run.backoff_seconds)
        d.wake_at = d.retry_at
        return d
    return _end(d, outcome, code)


def _attempt_lost(
    run: RunView, attempt: AttemptView, d: Decision, code: str, now: datetime
) -> Decision:
    """End the Attempt ``lost`` (``code``: ``lost-at-site`` or ``marked-lost``): the Run
    ends ``lost`` and its slot is freed, unless the action opts into a retry after a
    lost Attempt (``retry.onLost``) and Attempts are left; a cancelled Run never retries."""
    assert d.attempt is not None
    d.attempt.state = s.ATTEMPT_LOST
    d.attempt.reason_code = code
    d.attempt.ended = True
    d.waiting_reason = ""
    if (
        run.retry_on_lost
        and d.desired_state == s.DESIRED_RUN
        and attempt.number < run.max_attempts
    ):
        d.phase = s.PHASE_RETRY_WAIT
        d.retry_at = now + timedelta(seconds=run.backoff_seconds)
        d.wake_at = d.retry_at
        return d
    return _end(d, s.OUTCOME_LOST, code)


def _end(d: Decision, outcome: str, code: str) -> Decision:
    d.phase = s.PHASE_TERMINAL
    d.end = (outcome, code)
    return d


def _after_terminal_attempt(
    run: RunView, attempt: AttemptView, d: Decision, now: datetime, t: Timing
) -> Decision:
    """The Run waits between Attempts (retry-wait): cancel ends it; the retry time starts the next."""
    d.attempt = None  # a terminal Attempt is never rewritten
    if run.desired_state == s.DESIRED_CANCEL:
        return _end(d, s.OUTCOME_CANCELLED, reasons.CANCELLED_BY_MEMBER)
    retry_at = run.retry_at or now
    if now < retry_at:
        d.phase = s.PHASE_RETRY_WAIT
        d.retry_at = retry_at
        d.wake_at = retry_at
        return d
    if run.site_draining:
        d.phase = s.PHASE_RETRY_WAIT
        d.retry_at = retry_at
        return _held_by_drain(d, now, t)
    return _next_attempt(run, attempt.number + 1, d, now, t)


def _held_by_drain(d: Decision, now: datetime, t: Timing) -> Decision:
    """No new Attempt on a draining Site: wait (visibly) and look again each
    observe interval; resuming the Site wakes the Run at once."""
    d.waiting_reason = reasons.WAIT_SITE_DRAINING
    d.wake_at = now + timedelta(seconds=t.observe_interval)
    return d


def _without_attempt(run: RunView, now: datetime, t: Timing) -> Decision:
    d = Decision(
        phase=run.phase,
        desired_state=run.desired_state,
        cancel_origin=run.cancel_origin,
        attempt=None,
        waiting_reason="",
    )
    if run.desired_state == s.DESIRED_CANCEL:
        return _end(d, s.OUTCOME_CANCELLED, reasons.CANCELLED_BEFORE_START)
    if run.site_draining:
        return _held_by_drain(d, now, t)
    return _next_attempt(run, 1, d, now, t)


def _next_attempt(run: RunView, number: int, d: Decision, now: datetime, t: Timing) -> Decision:
    prep_kind, _, _ = kinds(run.family)
    deadline = now + timedelta(seconds=t.dispatch_timeout)
    d.new_attempt_number = number
    d.new_attempt_deadline = deadline
    d.commands.append((prep_kind, prepare_payload(run.material, deadline)))
    d.phase = s.PHASE_PREPARING
    d.retry_at = None
    d.observation_phase = ""
    d.native_state = ""
    d.confidence = s.CONFIDENCE_NONE
    d.wake_at = min(now + timedelta(seconds=t.result_recheck), deadline)
    return d
