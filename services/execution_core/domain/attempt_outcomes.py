"""How an Attempt ends and what the Run does next (seed 004 §4E, §7C; ADR 0012, 0016, 0018).

Pure rules used by :func:`~execution_core.domain.lifecycle.decide` once it has
classified the current Attempt: the observe loop of an active Attempt, a definite
end (retry or end the Run), a lost Attempt, the wait between Attempts and the
start of the next one. Each takes the Decision being built and returns it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from execution_core.domain import reasons
from execution_core.domain import reconciliation as rec
from execution_core.domain import states as s
from execution_core.domain.lifecycle_facts import (
    AttemptView,
    CommandFact,
    Decision,
    RunView,
    Timing,
    kinds,
    prepare_payload,
)


def observe_loop(
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
    ``first_observe``, at most ``observe_interval``, so a short Run does not hold its
    admission slot a whole interval after its end; a long Run costs
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
            attempt.commands,
            now=now,
            stale_after=t.stale_after,
            observe_interval=t.observe_interval,
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
        d.wake_at = now + timedelta(
            seconds=min(t.result_recheck, t.stale_after, t.observe_interval)
        )
    else:
        d.wake_at = due
    return d


def stop_loop(
    attempt: AttemptView,
    d: Decision,
    now: datetime,
    t: Timing,
    stop_kind: str,
    reason: str,
    *,
    quiet: rec.Silence,
) -> Decision:
    """A stop was sent: wait for its answer, then observe until the native end.

    A stop answered "the Site does not know this Attempt" is not done — that
    Runtime cannot vouch that the native work stopped (another Runtime of the Site
    may hold it) — so it is sent again with the lost back-off
    (``min(lost_observe_max, first_observe · 2ⁿ)`` after the last answer) until a
    Runtime that knows the Attempt answers, or the reconciliation period ends it
    ``lost`` (:func:`~execution_core.domain.lifecycle.decide`, step 1b).
    """
    stops = sorted((c for c in attempt.commands if c.kind == stop_kind), key=lambda c: c.seq)
    latest = stops[-1]
    if latest.outcome is None:
        d.wake_at = now + timedelta(seconds=t.result_recheck)
        return d
    if rec.is_unknown_answer(latest):
        d.waiting_reason = reasons.WAIT_ATTEMPT_UNKNOWN_AT_SITE
        due = quiet.next_ask(t.first_observe, t.lost_observe_max) or now
        lost_at = quiet.lost_at(t.lost_after)
        if lost_at is not None:
            due = min(due, lost_at)
        if now >= due:
            d.commands.append((stop_kind, {"reason": reason}))
            d.wake_at = now + timedelta(seconds=t.result_recheck)
        else:
            d.wake_at = due
        return d
    return observe_loop(attempt, d, now, t, after=latest, quiet=quiet)


def end_without_native_work(
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


def attempt_ended(
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
        return end(d, s.OUTCOME_SUCCEEDED, reasons.COMPLETED)
    if cancelling:
        code = (
            reasons.DISPATCH_DEADLINE_PASSED
            if d.cancel_origin == "deadline"
            else reasons.CANCELLED_BY_MEMBER
        )
        if not d.attempt.reason_code:  # the Site reported "cancelled": say why, as the Run does
            d.attempt.reason_code = code
        return end(
            d, s.OUTCOME_FAILED if d.cancel_origin == "deadline" else s.OUTCOME_CANCELLED, code
        )
    if state == s.ATTEMPT_CANCELLED:
        d.attempt.reason_code = "cancelled-at-site"
        return end(d, s.OUTCOME_CANCELLED, "cancelled-at-site")
    if not permanent and attempt.number < run.max_attempts:
        d.phase = s.PHASE_RETRY_WAIT
        d.retry_at = now + timedelta(seconds=run.backoff_seconds)
        d.wake_at = d.retry_at
        return d
    return end(d, outcome, code)


def attempt_lost(
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
    if run.retry_on_lost and d.desired_state == s.DESIRED_RUN and attempt.number < run.max_attempts:
        d.phase = s.PHASE_RETRY_WAIT
        d.retry_at = now + timedelta(seconds=run.backoff_seconds)
        d.wake_at = d.retry_at
        return d
    return end(d, s.OUTCOME_LOST, code)


def end(d: Decision, outcome: str, code: str) -> Decision:
    """Make the Run terminal with ``outcome`` and reason ``code``."""
    d.phase = s.PHASE_TERMINAL
    d.end = (outcome, code)
    return d


def after_terminal_attempt(
    run: RunView, attempt: AttemptView, d: Decision, now: datetime, t: Timing
) -> Decision:
    """The Run waits between Attempts (retry-wait): cancel ends it; the retry time starts the next."""
    d.attempt = None  # a terminal Attempt is never rewritten
    if run.desired_state == s.DESIRED_CANCEL:
        return end(d, s.OUTCOME_CANCELLED, reasons.CANCELLED_BY_MEMBER)
    retry_at = run.retry_at or now
    if now < retry_at:
        d.phase = s.PHASE_RETRY_WAIT
        d.retry_at = retry_at
        d.wake_at = retry_at
        return d
    if run.site_draining:
        d.phase = s.PHASE_RETRY_WAIT
        d.retry_at = retry_at
        return held_by_drain(d, now, t)
    return next_attempt(run, attempt.number + 1, d, now, t)


def held_by_drain(d: Decision, now: datetime, t: Timing) -> Decision:
    """No new Attempt on a draining Site: wait (visibly) and look again each
    observe interval; resuming the Site wakes the Run at once."""
    d.waiting_reason = reasons.WAIT_SITE_DRAINING
    d.wake_at = now + timedelta(seconds=t.observe_interval)
    return d


def without_attempt(run: RunView, now: datetime, t: Timing) -> Decision:
    """A Run with no Attempt yet: cancel ends it, a draining Site holds it, else Attempt 1."""
    d = Decision(
        phase=run.phase,
        desired_state=run.desired_state,
        cancel_origin=run.cancel_origin,
        attempt=None,
        waiting_reason="",
    )
    if run.desired_state == s.DESIRED_CANCEL:
        return end(d, s.OUTCOME_CANCELLED, reasons.CANCELLED_BEFORE_START)
    if run.site_draining:
        return held_by_drain(d, now, t)
    return next_attempt(run, 1, d, now, t)


def next_attempt(run: RunView, number: int, d: Decision, now: datetime, t: Timing) -> Decision:
    """Create Attempt ``number`` with a fresh dispatch deadline and its prepare/apply."""
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
