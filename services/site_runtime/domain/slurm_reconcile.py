"""Reconciling one stage's saved facts with what Slurm shows now (docs/site-runtime.md,
Reconciliation).

Each observe (and each cancel that meets a job Slurm no longer lists) hands
:func:`reconcile` three inputs: the stage's saved facts, the queue's answer
(slurmctld's job list) and accounting's answer (slurmdbd), each asked on its own, so
one failing does not stop the other. A :class:`Sighting` is ``found`` (with the
job), ``absent`` (the list does not hold it, or the exact unknown-job answer) or
``unavailable`` (any other trouble: nothing is concluded from it).

The rules, in order:

* saved terminal facts are immutable: a later contradicting sighting (another end
  state, or slurmctld showing the job live again) is appended to ``contradictions``
  and never rewrites them;
* a found job carrying another identity is a contradiction that stops the Attempt
  (``native-identity-mismatch``), evidence kept; an accounting record lacking its
  name or comment is incomplete (slurmdbd catching up) and counts as unavailable;
* in the queue, ``PREEMPTED`` / ``REQUEUED`` (and the other requeue states) stay
  transitionable; any other end state is terminal; both clear every deadline;
* ``PREEMPTED`` only in accounting while absent from the queue starts (or keeps) the
  requeue-visibility deadline; past it the stage ends ``PREEMPTED`` (failure
  ``preempted``); reappearance in the queue clears it;
* any other end state in accounting is terminal;
* absent from the queue and not (yet) ended in accounting: nonterminal, with the
  reconciliation deadline saved at the first such sighting; past it the stage is
  ``lost`` (terminal, failure ``native-evidence-lost``), never succeeded;
* a queue that could not be asked concludes nothing (the last known state, or
  accounting's, is reported);
* whenever the job is not in the queue's answer: accounting unavailable →
  confidence ``uncertain``, else ``stale``;
* a job Slurm requeued (a ``restart_cnt`` above 0, or a requeue state) is counted in
  ``restarts``; past the stage's bound (:func:`requeue_bound`: the Site's
  ``compute_requeues`` for compute, none for the staging stages, which move the
  repository) the stage ends with ``requeue_refused`` (failure ``slurm-job-requeued``)
  and :attr:`Reconciled.cancel` asks the caller to cancel the re-run job first.

Pure: the clock is handed in as ``now`` (epoch seconds); no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from site_runtime.domain.slurm_jobs import NativeIdentity, NativeJob

FOUND, ABSENT, UNAVAILABLE = "found", "absent", "unavailable"
#: Queue states that look ended but may still come back as a new run of the job.
TRANSITIONABLE = frozenset({"PREEMPTED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
#: States of a job Slurm is putting back in the queue for another run.
REQUEUE_STATES = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
#: At most this many contradictions are kept per stage (the first ones: evidence).
MAX_CONTRADICTIONS = 8
IDENTITY_MISMATCH = "native-identity-mismatch"
EVIDENCE_LOST = "native-evidence-lost"
REQUEUED = "slurm-job-requeued"
_RANK = {None: 0, "stale": 1, "uncertain": 2}


@dataclass(frozen=True)
class Sighting:
    """One source's answer about one job: ``status`` is found / absent / unavailable."""

    status: str
    job: NativeJob | None = None

    @classmethod
    def of(cls, job: NativeJob | None) -> Sighting:
        """``found`` for a job, ``absent`` for None (an exact unknown-job answer)."""
        return cls(FOUND, job) if job is not None else cls(ABSENT)


UNASKED = Sighting(UNAVAILABLE)


@dataclass(frozen=True)
class Deadlines:
    """The Site's reconciliation settings, seconds: how long a job may be absent from
    both sources (``lost_seconds``, default 600) and how long a job preempted in
    accounting may stay out of the queue before it counts as preempted for good
    (``requeue_seconds``, default 300), and how many Slurm requeues a compute job may
    have before the Attempt fails ``slurm-job-requeued`` (``compute_requeues``,
    default 0: Execution Core, not Slurm, starts work again)."""

    lost_seconds: float = 600.0
    requeue_seconds: float = 300.0
    compute_requeues: int = 0


def requeue_bound(stage: str, deadlines: Deadlines) -> int:
    """How many Slurm requeues ``stage``'s job may have: the Site's bound for compute;
    0 for stage-in and stage-out (a re-run would move the repository again)."""
    return deadlines.compute_requeues if stage == "compute" else 0


@dataclass(frozen=True)
class Reconciled:
    """The stage's facts to save, the confidence of what it reports (None: current,
    ``stale``, ``uncertain``), the contradiction code that stops the Attempt, and
    ``cancel``: the job must be cancelled before the facts are saved (a refused requeue)."""

    facts: dict[str, Any]
    confidence: str | None = None
    contradiction: str | None = None
    cancel: bool = False


def facts_of(job: NativeJob, *, terminal: bool | None = None) -> dict[str, Any]:
    """The saved facts of a sighted job (``terminal`` overrides the state's own rule)."""
    return {
        "state": job.state,
        "terminal": job.terminal if terminal is None else terminal,
        "exit_code": job.exit_code,
        "signal": job.signal,
        "reason": job.reason,
        "source": job.source,
        "restarts": job.restarts,
    }


def restarts_of(saved: Mapping[str, Any], jobs: Iterable[NativeJob]) -> int:
    """How many times Slurm requeued the job, from the saved count and the sighted
    records (``restart_cnt``; a requeue state counts as at least one)."""
    count = int(saved.get("restarts") or 0)
    for job in jobs:
        count = max(count, job.restarts or 0, 1 if job.state in REQUEUE_STATES else 0)
    return count


def _requeues(
    saved: Mapping[str, Any], found: list[NativeJob], result: Reconciled, bound: int
) -> Reconciled:
    """``result`` with the requeue count saved; past ``bound`` the stage ends
    ``requeue_refused`` and its job is to be cancelled (module doc)."""
    count = restarts_of(saved, found)
    if count == 0:
        return result
    facts = {**result.facts, "restarts": count}
    if count <= bound:
        return Reconciled(facts, result.confidence, result.contradiction)
    facts.update(terminal=True, requeue_refused=True)
    live = any(not job.terminal for job in found)
    return Reconciled(facts, result.confidence, cancel=live)


def _contradict(saved: Mapping[str, Any], jobs: Iterable[NativeJob]) -> dict[str, Any]:
    facts = dict(saved)
    seen = list(facts.get("contradictions") or [])
    for job in jobs:
        entry = {"state": job.state, "source": job.source}
        if entry not in seen and len(seen) < MAX_CONTRADICTIONS:
            seen.append(entry)
    if seen:
        facts["contradictions"] = seen
    return facts


def _contradicts_end(saved: Mapping[str, Any], sighting: Sighting) -> bool:
    job = sighting.job
    if sighting.status != FOUND or job is None or job.state == saved.get("state"):
        return False
    # Accounting lags behind slurmctld: its live states after an end are not evidence.
    return job.terminal or job.source == "slurmctld"


def reconcile(
    saved: Mapping[str, Any] | None,
    queue: Sighting,
    accounting: Sighting,
    identity: NativeIdentity,
    now: float,
    deadlines: Deadlines = Deadlines(),
    *,
    requeues: int = 0,
) -> Reconciled:
    """The stage's reconciled facts (module doc); ``saved`` is None before any sighting;
    ``requeues`` the stage's requeue bound (:func:`requeue_bound`)."""
    saved = dict(saved or {})
    if saved.get("terminal"):
        against = [s.job for s in (queue, accounting) if _contradicts_end(saved, s) and s.job]
        return Reconciled(_contradict(saved, against) if against else saved)
    if _incomplete(accounting, identity):
        accounting = UNASKED
    found = [s.job for s in (queue, accounting) if s.status == FOUND and s.job is not None]
    strangers = [job for job in found if not identity.matches(job)]
    if strangers:
        return Reconciled(_contradict(saved, strangers), contradiction=IDENTITY_MISMATCH)
    return _requeues(saved, found, _sighted(saved, queue, accounting, now, deadlines), requeues)


def _sighted(
    saved: Mapping[str, Any],
    queue: Sighting,
    accounting: Sighting,
    now: float,
    deadlines: Deadlines,
) -> Reconciled:
    if queue.status == FOUND and queue.job is not None:
        job = queue.job
        transitionable = job.state in TRANSITIONABLE
        return Reconciled(facts_of(job, terminal=False if transitionable else None))
    acct = accounting.job if accounting.status == FOUND else None
    queue_absent = queue.status == ABSENT
    if acct is not None and acct.state == "PREEMPTED":
        return _preempted(saved, acct, queue_absent, now, deadlines)
    if acct is not None and acct.terminal:
        return Reconciled(facts_of(acct))
    if not queue_absent:
        # The queue could not be asked: report what is known, conclude nothing.
        facts = facts_of(acct) if acct is not None else saved
        facts = {**facts, **_kept(saved, "lost_deadline", "requeue_deadline")}
        return Reconciled(facts, _doubt(accounting))
    return _absent(saved, accounting, now, deadlines)


def _incomplete(sighting: Sighting, identity: NativeIdentity) -> bool:
    """True for an accounting record without its name or comment while it does not
    match: slurmdbd still catching up on records slurmctld kept while it was away.
    It is no evidence either way (unavailable), never an identity contradiction."""
    job = sighting.job
    return (
        sighting.status == FOUND
        and job is not None
        and not identity.matches(job)
        and (not job.name or not job.comment)
    )


def _kept(saved: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {key: saved[key] for key in keys if saved.get(key) is not None}


def _preempted(
    saved: Mapping[str, Any], acct: NativeJob, queue_absent: bool, now: float, d: Deadlines
) -> Reconciled:
    facts = facts_of(acct, terminal=False)
    deadline = saved.get("requeue_deadline")
    if not queue_absent:
        facts.update(_kept(saved, "requeue_deadline"))
        return Reconciled(facts, "stale")  # accounting answered; the queue did not
    if deadline is None:
        deadline = now + d.requeue_seconds
    if now >= deadline:
        return Reconciled({**facts, "terminal": True, "requeue_deadline": deadline})
    return Reconciled({**facts, "requeue_deadline": deadline})


def _absent(saved: Mapping[str, Any], accounting: Sighting, now: float, d: Deadlines) -> Reconciled:
    facts = {
        "state": saved.get("state") or "PENDING",
        "terminal": False,
        "exit_code": saved.get("exit_code"),
        "signal": saved.get("signal"),
        "reason": saved.get("reason"),
        "source": saved.get("source"),
        "restarts": saved.get("restarts"),
    }
    deadline = saved.get("lost_deadline")
    if deadline is None:
        deadline = now + d.lost_seconds
    facts["lost_deadline"] = deadline
    if now >= deadline:
        facts.update(terminal=True, lost=True)
        return Reconciled(facts)
    return Reconciled(facts, _doubt(accounting))


def _doubt(accounting: Sighting) -> str:
    """``uncertain`` when accounting could not be asked, else ``stale`` (what is
    reported is the last known state)."""
    return "uncertain" if accounting.status == UNAVAILABLE else "stale"


def worst(confidences: Iterable[str | None]) -> str | None:
    """The least certain of several confidences (None < stale < uncertain)."""
    return max(confidences, key=lambda c: _RANK[c], default=None)
