"""What the Site can vouch for: lost Attempts and observation confidence (seed 002
§9.2, §9.3, §18).

Pure rules over an Attempt's recorded Site commands (duck-typed
:class:`~execution_core.domain.lifecycle_facts.CommandFact` values: ``kind``, ``seq``,
``outcome``, ``code``, ``observation``, ``created_at``, ``result_at``):

- **Lost Attempts.** When the Site answers an ``observe`` or a stop (``cancel``,
  ``terminate``) of an Attempt whose start was sent with one of
  :data:`~execution_core.domain.reasons.UNKNOWN_ATTEMPT_CODES`, it does not know
  that Attempt; a stop so answered is not done and is sent again. Execution Core keeps the answers (they are the
  commands' results), keeps asking with back-off (``first_observe · 2ⁿ`` up to
  ``lost_observe_max`` seconds after each answer) and, when every answer since the
  first such one said "unknown" for ``lost_after`` seconds, ends the Attempt
  ``lost``. Any other answer ends the streak: the Site knows the Attempt again.
- **Confidence.** ``uncertain`` while the Site cannot tell (a start without a result
  for ``stale_after``; the newest observe deferred by the Site; an ``unknown`` phase
  or an unknown-Attempt answer; an observation that says so itself); ``stale`` when
  the newest observe has waited for its result one observe cycle
  (``min(stale_after, observe_interval)``) or the last result is older than
  ``stale_after``; else ``current``.
- **Mark lost.** An operator may end an Attempt sooner only while the Site cannot
  vouch for it (:func:`mark_lost_verdict`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from execution_core.domain import reasons
from execution_core.domain import states as s

#: The commands whose answer can say the Site does not know the Attempt: an observe
#: and a stop. A stop so answered is not done (the Runtime cannot vouch that the
#: native work stopped): it is asked again like an observe.
ASKING_KINDS = ("observe", "cancel", "terminate")


def is_unknown_answer(command: Any) -> bool:
    """True for an observe or stop result saying the Site does not know the Attempt."""
    return (
        command.kind in ASKING_KINDS
        and command.outcome == "refused"
        and (command.code or "") in reasons.UNKNOWN_ATTEMPT_CODES
    )


@dataclass(frozen=True)
class Silence:
    """The trailing run of "unknown Attempt" answers to observes after the start.

    ``since`` is the PostgreSQL time the first of them was recorded (None: the last
    answer was not one); ``answers`` how many; ``last_at`` when the newest came.
    """

    since: datetime | None = None
    answers: int = 0
    last_at: datetime | None = None

    def lost_at(self, lost_after: float) -> datetime | None:
        """When the reconciliation period ends (None outside a streak)."""
        return None if self.since is None else self.since + timedelta(seconds=lost_after)

    def next_ask(self, first_observe: float, cap: float) -> datetime | None:
        """When to ask again: ``first_observe · 2ⁿ`` (n answers so far), at most ``cap`` s."""
        if self.last_at is None:
            return None
        step = min(cap, first_observe * 2 ** min(self.answers, 32))
        return self.last_at + timedelta(seconds=step)


def silence(commands: Iterable[Any], after_seq: int) -> Silence:
    """The :class:`Silence` of the observes and stops sent after the command with
    ``after_seq``."""
    answered = sorted(
        (
            c
            for c in commands
            if c.kind in ASKING_KINDS and c.seq > after_seq and c.outcome is not None
        ),
        key=lambda c: c.seq,
    )
    streak = []
    for c in reversed(answered):
        if not is_unknown_answer(c):
            break
        streak.append(c)
    if not streak:
        return Silence()
    times = [c.result_at or c.created_at for c in streak]
    return Silence(since=min(times), answers=len(streak), last_at=max(times))


def confidence(
    commands: Iterable[Any],
    *,
    start: Any | None,
    phase: str,
    deferred_command_id: str | None,
    now: datetime,
    stale_after: float,
    observe_interval: float,
) -> str:
    """The observation confidence of an Attempt now (see module doc)."""
    if (
        start is not None
        and start.outcome is None
        and (now - start.created_at).total_seconds() >= stale_after
    ):
        return s.CONFIDENCE_UNCERTAIN  # a native start without a result (seed 002 §9.3)
    observes = sorted((c for c in commands if c.kind == "observe"), key=lambda c: c.seq)
    newest = observes[-1] if observes else None
    if newest is not None and newest.outcome is None:
        if deferred_command_id is not None and newest.command_id == deferred_command_id:
            return s.CONFIDENCE_UNCERTAIN  # the Site said it cannot observe it right now
        waited = (now - newest.created_at).total_seconds()
        if waited >= min(stale_after, observe_interval):
            return s.CONFIDENCE_STALE  # one observe cycle without an answer
    latest = next((c for c in reversed(observes) if c.outcome is not None), None)
    asked = [c for c in commands if c.kind in ASKING_KINDS and c.outcome is not None]
    if asked and is_unknown_answer(max(asked, key=lambda c: c.seq)):
        return s.CONFIDENCE_UNCERTAIN  # the newest answer: the Site does not know it
    if latest is None:
        return s.CONFIDENCE_NONE if not phase else s.CONFIDENCE_CURRENT
    obs = latest.observation or {}
    if is_unknown_answer(latest) or obs.get("phase") == s.OBS_UNKNOWN:
        return s.CONFIDENCE_UNCERTAIN
    said = obs.get("confidence")
    if said in (s.CONFIDENCE_STALE, s.CONFIDENCE_UNCERTAIN):
        return str(said)  # the Site answered with what it knew, and said how well
    if latest.result_at is not None and (now - latest.result_at).total_seconds() > stale_after:
        return s.CONFIDENCE_STALE
    return s.CONFIDENCE_CURRENT


def stale_check_at(
    commands: Iterable[Any], *, now: datetime, stale_after: float, observe_interval: float
) -> datetime | None:
    """When the newest, still unanswered observe turns the confidence ``stale`` (None:
    none is pending, or it already has)."""
    observes = sorted((c for c in commands if c.kind == "observe"), key=lambda c: c.seq)
    if not observes or observes[-1].outcome is not None:
        return None
    at = observes[-1].created_at + timedelta(seconds=min(stale_after, observe_interval))
    return at if at > now else None


#: What a lost Attempt's native work becomes: no stop reaches it (no Runtime that
#: knows it answers), so it may still run and must be stopped at the Site.
NOT_STOPPED = (
    "Its native work is not stopped by this (nor by a cancellation: no Runtime of the Site "
    "that knows the Attempt answers) and may still run: stop it at the Site (the jobs "
    "`metallo run show` lists), or bring back the Runtime that holds it and cancel instead"
)


@dataclass(frozen=True)
class MarkLostVerdict:
    """Whether ``mark-lost`` is allowed now, and the explanation an operator sees."""

    eligible: bool
    explanation: str


def mark_lost_verdict(
    *,
    phase: str,
    attempt_number: int | None,
    attempt_state: str | None,
    start: Any | None,
    already_marked: bool,
    silence_: Silence,
    confidence_: str,
    lost_after: float,
    will_retry: bool,
    now: datetime,
) -> MarkLostVerdict:
    """May an operator end the current Attempt as ``lost`` now? Only when the Run is
    not terminal, the Attempt's native start was sent, and the Site cannot vouch for
    it: it answered that it does not know the Attempt, or the confidence is
    ``uncertain`` / ``stale``. Otherwise the Site still observes it (cancel instead)."""
    if phase == s.PHASE_TERMINAL:
        return MarkLostVerdict(False, "the Run has already ended; nothing to reconcile")
    if attempt_number is None or attempt_state in s.ATTEMPT_TERMINAL:
        return MarkLostVerdict(False, "the Run has no active Attempt (it waits to retry or to be planned)")
    if start is None:
        return MarkLostVerdict(
            False, "the Attempt's native start was never sent: cancel the Run instead"
        )
    if already_marked:
        return MarkLostVerdict(False, f"Attempt {attempt_number} is already marked lost; it ends shortly")
    then = "a new Attempt follows (retry.onLost)" if will_retry else "no new Attempt follows"
    if silence_.since is not None:
        ends = silence_.lost_at(lost_after)
        left = max(0.0, (ends - now).total_seconds()) if ends is not None else 0.0
        return MarkLostVerdict(
            True,
            f"the Site answered {silence_.answers} time(s) since {_hms(silence_.since)} that it does "
            f"not know Attempt {attempt_number}; it would be ended lost in {left:.0f} s anyway. "
            f"mark-lost ends it now as lost (reason marked-lost) and frees its slot; {then}. "
            f"{NOT_STOPPED}",
        )
    if confidence_ in (s.CONFIDENCE_UNCERTAIN, s.CONFIDENCE_STALE):
        what = "its start has no result" if start.outcome is None else f"its observation is {confidence_}"
        return MarkLostVerdict(
            True,
            f"the Site cannot vouch for Attempt {attempt_number} ({what}). mark-lost ends it now as "
            f"lost (reason marked-lost) and frees its slot; {then}. {NOT_STOPPED}",
        )
    return MarkLostVerdict(
        False,
        f"the Site still observes Attempt {attempt_number} (confidence {confidence_}): "
        "cancel the Run instead (`metallo run cancel`)",
    )


def _hms(t: datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
