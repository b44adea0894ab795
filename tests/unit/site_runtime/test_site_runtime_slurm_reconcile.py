"""The reconciler of one stage's saved facts with slurmctld's and slurmdbd's answers
(domain/slurm_reconcile.py), table-driven, and the chain's verdict on its results."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from site_runtime.adaptors.slurm.responses import parse_jobs
from site_runtime.domain.slurm_chain import contradiction_verdict, decide_outcome
from site_runtime.domain.slurm_jobs import NativeIdentity, NativeJob, stage_identity
from site_runtime.domain.slurm_reconcile import (
    ABSENT,
    EVIDENCE_LOST,
    IDENTITY_MISMATCH,
    MAX_CONTRADICTIONS,
    REQUEUED,
    UNASKED,
    Deadlines,
    Sighting,
    reconcile,
    requeue_bound,
    worst,
)

ID = stage_identity("metallo", "run-1", "att-1", "compute", "acct", "alice")
T0 = 1_000_000.0
D = Deadlines(lost_seconds=600, requeue_seconds=300)
GONE = Sighting(ABSENT)


def job(state: str, source: str = "slurmctld", *, name: str = ID.name, **kw) -> NativeJob:
    return NativeJob(
        job_id="42",
        name=name,
        comment=ID.comment,
        account=ID.account,
        user=ID.user,
        state=state,
        reason=kw.get("reason"),
        exit_code=kw.get("exit_code"),
        signal=kw.get("signal"),
        partition="compute",
        dependency=None,
        source=source,
        restarts=kw.get("restarts"),
    )


def q(state: str, **kw) -> Sighting:
    return Sighting.of(job(state, "slurmctld", **kw))


def a(state: str, **kw) -> Sighting:
    return Sighting.of(job(state, "slurmdbd", **kw))


RUNNING = {"state": "RUNNING", "terminal": False, "source": "slurmctld"}

# (case, saved, queue, accounting, now, state, terminal, confidence)
CASES = [
    ("live in the queue", RUNNING, q("RUNNING"), UNASKED, T0, "RUNNING", False, None),
    (
        "pending in the queue",
        None,
        q("PENDING", reason="Resources"),
        UNASKED,
        T0,
        "PENDING",
        False,
        None,
    ),
    (
        "ended in the queue",
        RUNNING,
        q("COMPLETED", exit_code=0),
        UNASKED,
        T0,
        "COMPLETED",
        True,
        None,
    ),
    (
        "preempted in the queue stays transitionable",
        RUNNING,
        q("PREEMPTED"),
        UNASKED,
        T0,
        "PREEMPTED",
        False,
        None,
    ),
    (
        "left the queue, ended in accounting",
        RUNNING,
        GONE,
        a("FAILED", exit_code=1),
        T0,
        "FAILED",
        True,
        None,
    ),
    (
        "queue unreadable, ended in accounting",
        RUNNING,
        UNASKED,
        a("COMPLETED"),
        T0,
        "COMPLETED",
        True,
        None,
    ),
    (
        "queue unreadable, live in accounting",
        RUNNING,
        UNASKED,
        a("RUNNING"),
        T0,
        "RUNNING",
        False,
        "stale",
    ),
    ("queue unreadable, accounting absent", RUNNING, UNASKED, GONE, T0, "RUNNING", False, "stale"),
    ("both unreadable", RUNNING, UNASKED, UNASKED, T0, "RUNNING", False, "uncertain"),
    ("absent from both: last state kept", RUNNING, GONE, GONE, T0, "RUNNING", False, "stale"),
    ("absent, accounting lags live", RUNNING, GONE, a("RUNNING"), T0, "RUNNING", False, "stale"),
    ("absent, accounting unavailable", RUNNING, GONE, UNASKED, T0, "RUNNING", False, "uncertain"),
    ("preempted only in accounting", RUNNING, GONE, a("PREEMPTED"), T0, "PREEMPTED", False, None),
]


@pytest.mark.parametrize(
    ("saved", "queue", "accounting", "now", "state", "terminal", "confidence"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_reconcile_table(saved, queue, accounting, now, state, terminal, confidence):
    got = reconcile(saved, queue, accounting, ID, now, D)
    assert (got.facts["state"], got.facts["terminal"], got.confidence) == (
        state,
        terminal,
        confidence,
    )
    assert got.contradiction is None


def test_absence_from_both_saves_one_fixed_deadline_then_the_stage_is_lost():
    first = reconcile(RUNNING, GONE, GONE, ID, T0, D)
    assert first.facts["lost_deadline"] == T0 + 600
    later = reconcile(first.facts, GONE, UNASKED, ID, T0 + 599, D)
    assert later.facts["lost_deadline"] == T0 + 600  # fixed at the first sighting
    assert (later.facts["terminal"], later.confidence) == (False, "uncertain")
    lost = reconcile(later.facts, GONE, GONE, ID, T0 + 600, D)
    assert lost.facts["terminal"] and lost.facts["lost"]
    assert lost.facts["state"] == "RUNNING"  # the last scheduler state, never COMPLETED


def test_reappearance_clears_the_reconciliation_deadline():
    first = reconcile(RUNNING, GONE, GONE, ID, T0, D)
    back = reconcile(first.facts, q("RUNNING"), UNASKED, ID, T0 + 10, D)
    assert "lost_deadline" not in back.facts
    again = reconcile(back.facts, GONE, GONE, ID, T0 + 20, D)
    assert again.facts["lost_deadline"] == T0 + 620


def test_an_unreadable_queue_keeps_the_deadline_and_concludes_nothing():
    first = reconcile(RUNNING, GONE, GONE, ID, T0, D)
    blind = reconcile(first.facts, UNASKED, GONE, ID, T0 + 900, D)
    assert (blind.facts["terminal"], blind.facts["lost_deadline"]) == (False, T0 + 600)


def test_preempted_in_accounting_waits_for_a_requeue_then_ends_preempted():
    first = reconcile(RUNNING, GONE, a("PREEMPTED"), ID, T0, D)
    assert first.facts["requeue_deadline"] == T0 + 300 and not first.facts["terminal"]
    still = reconcile(first.facts, GONE, a("PREEMPTED"), ID, T0 + 299, D)
    assert still.facts["requeue_deadline"] == T0 + 300 and not still.facts["terminal"]
    done = reconcile(still.facts, GONE, a("PREEMPTED"), ID, T0 + 300, D)
    assert (done.facts["state"], done.facts["terminal"]) == ("PREEMPTED", True)


def test_a_requeued_job_reappearing_clears_the_requeue_deadline():
    first = reconcile(RUNNING, GONE, a("PREEMPTED"), ID, T0, D)
    back = reconcile(first.facts, q("PENDING", reason="BeginTime"), UNASKED, ID, T0 + 100, D)
    assert "requeue_deadline" not in back.facts and back.facts["state"] == "PENDING"
    gone = reconcile(back.facts, GONE, a("PREEMPTED"), ID, T0 + 200, D)
    assert gone.facts["requeue_deadline"] == T0 + 500


def test_preempted_in_accounting_with_an_unreadable_queue_starts_no_deadline():
    got = reconcile(RUNNING, UNASKED, a("PREEMPTED"), ID, T0, D)
    assert "requeue_deadline" not in got.facts and got.confidence == "stale"


def test_terminal_evidence_is_immutable_and_contradictions_are_recorded_once():
    ended = {"state": "COMPLETED", "terminal": True, "exit_code": 0, "source": "slurmctld"}
    got = reconcile(ended, q("REQUEUED"), UNASKED, ID, T0, D)
    assert got.facts["state"] == "COMPLETED" and got.facts["terminal"]
    assert got.facts["contradictions"] == [{"state": "REQUEUED", "source": "slurmctld"}]
    again = reconcile(got.facts, q("REQUEUED"), a("FAILED"), ID, T0, D)
    assert again.facts["contradictions"] == [
        {"state": "REQUEUED", "source": "slurmctld"},
        {"state": "FAILED", "source": "slurmdbd"},
    ]
    assert again.contradiction is None


def test_lagging_accounting_does_not_contradict_an_end():
    ended = {"state": "COMPLETED", "terminal": True}
    got = reconcile(ended, GONE, a("RUNNING"), ID, T0, D)
    assert "contradictions" not in got.facts


def test_contradictions_are_bounded():
    facts = {"state": "COMPLETED", "terminal": True}
    for n in range(MAX_CONTRADICTIONS + 4):
        facts = reconcile(facts, q(f"STATE{n}"), UNASKED, ID, T0, D).facts
    assert len(facts["contradictions"]) == MAX_CONTRADICTIONS


@pytest.mark.parametrize("where", ["queue", "accounting"])
def test_another_identity_stops_the_attempt_keeping_the_evidence(where):
    stranger = job("RUNNING", "slurmctld" if where == "queue" else "slurmdbd", name="other")
    queue = Sighting.of(stranger) if where == "queue" else GONE
    accounting = Sighting.of(stranger) if where == "accounting" else UNASKED
    got = reconcile(RUNNING, queue, accounting, ID, T0, D)
    assert got.contradiction == IDENTITY_MISMATCH
    assert got.facts["state"] == "RUNNING"  # the saved facts, not the stranger's
    assert got.facts["contradictions"][0]["state"] == "RUNNING"


def _rows(compute_facts):
    done = {"state": "COMPLETED", "terminal": True}
    return {
        "stage-in": SimpleNamespace(
            stage="stage-in", state="submitted", job_id="1", native=done, refusal=None
        ),
        "compute": SimpleNamespace(
            stage="compute", state="submitted", job_id="2", native=compute_facts, refusal=None
        ),
        "stage-out": SimpleNamespace(
            stage="stage-out", state="prepared", job_id=None, native=None, refusal=None
        ),
    }


def test_a_lost_stage_fails_the_attempt_native_evidence_lost():
    lost = reconcile({**RUNNING, "lost_deadline": T0}, GONE, GONE, ID, T0 + 1, D).facts
    verdict = decide_outcome(_rows(lost), cancel_requested=False)
    assert verdict.phase == "failed"
    assert verdict.failure["code"] == EVIDENCE_LOST
    assert (verdict.failure["stage"], verdict.failure["scheduler_state"]) == ("compute", "RUNNING")


def test_a_stage_preempted_for_good_fails_the_attempt_preempted():
    facts = {**RUNNING, "requeue_deadline": T0}
    ended = reconcile(facts, GONE, a("PREEMPTED"), ID, T0, D).facts
    verdict = decide_outcome(_rows(ended), cancel_requested=False)
    assert (verdict.phase, verdict.failure["code"]) == ("failed", "preempted")


def test_a_contradiction_verdict_names_the_stage_and_code():
    verdict = contradiction_verdict("compute", _rows(RUNNING)["compute"], IDENTITY_MISMATCH)
    assert (verdict.phase, verdict.failure["code"], verdict.failure["job_id"]) == (
        "failed",
        IDENTITY_MISMATCH,
        "2",
    )


def test_worst_confidence():
    assert worst([]) is None
    assert worst([None, "stale"]) == "stale"
    assert worst(["stale", "uncertain", None]) == "uncertain"


# Recorded from the lab (slurmrestd 22.05.8): a job submitted with --requeue, requeued
# by ``scontrol requeue`` while it ran, then cancelled while pending again.
FIXTURES = Path(__file__).parent / "fixtures"


def recorded(name: str, source: str) -> list[NativeJob]:
    return parse_jobs(json.loads((FIXTURES / name).read_text()), source)


def test_recorded_requeue_shapes_are_read_as_transitionable():
    (queued,) = recorded("v0.0.38_job_pending_after_requeue.json", "slurmctld")
    assert (queued.state, queued.requeue, queued.terminal) == ("PENDING", True, False)
    first_run = recorded("dbv0.0.38_job_requeued_then_cancelled.json", "slurmdbd")[0]
    assert (first_run.state, first_run.terminal) == ("REQUEUED", False)
    identity = NativeIdentity(first_run.name, first_run.comment, first_run.account, first_run.user)
    # Gone from the queue with only the requeued run in accounting: not an end.
    got = reconcile(RUNNING, GONE, Sighting.of(first_run), identity, T0, D, requeues=1)
    assert (got.facts["terminal"], got.facts["lost_deadline"]) == (False, T0 + 600)
    assert got.facts["restarts"] == 1
    in_queue = reconcile(RUNNING, Sighting.of(queued), UNASKED, identity, T0, D, requeues=1)
    assert (in_queue.facts["state"], in_queue.facts["terminal"]) == ("PENDING", False)
    assert (in_queue.facts["restarts"], in_queue.cancel) == (1, False)
    # With no requeue allowed (the default) both shapes end the stage and cancel the job.
    for queue, accounting in ((Sighting.of(queued), UNASKED), (GONE, Sighting.of(first_run))):
        refused = reconcile(RUNNING, queue, accounting, identity, T0, D)
        assert (refused.facts["terminal"], refused.facts["requeue_refused"]) == (True, True)
        assert refused.cancel


def test_a_requeue_within_the_bound_is_transitionable_and_counted():
    got = reconcile(RUNNING, q("REQUEUED"), UNASKED, ID, T0, D, requeues=1)
    assert (got.facts["state"], got.facts["terminal"], got.facts["restarts"]) == (
        "REQUEUED", False, 1)
    again = reconcile(got.facts, q("PENDING", restarts=1), UNASKED, ID, T0 + 5, D, requeues=1)
    assert (again.facts["terminal"], again.facts["restarts"], again.cancel) == (False, 1, False)
    # A second requeue passes the bound of one.
    past = reconcile(again.facts, q("RUNNING", restarts=2), UNASKED, ID, T0 + 9, D, requeues=1)
    assert (past.facts["terminal"], past.facts["restarts"], past.cancel) == (True, 2, True)


def test_a_requeue_past_the_bound_fails_the_attempt_and_cancels_the_re_run():
    got = reconcile(RUNNING, q("PENDING", restarts=1, reason="BeginTime"), UNASKED, ID, T0, D)
    assert got.cancel and got.facts["requeue_refused"] and got.facts["restarts"] == 1
    verdict = decide_outcome(_rows(got.facts), False)
    assert (verdict.phase, verdict.failure["code"], verdict.failure["stage"]) == (
        "failed", REQUEUED, "compute")


def test_a_re_run_that_completed_is_no_success_of_the_first():
    got = reconcile(RUNNING, q("COMPLETED", exit_code=0, restarts=1), UNASKED, ID, T0, D)
    assert (got.facts["terminal"], got.cancel) == (True, False)  # nothing live to cancel
    assert decide_outcome(_rows(got.facts), False).failure["code"] == REQUEUED


def test_only_compute_may_be_requeued_and_only_as_often_as_the_site_allows():
    allowing = Deadlines(compute_requeues=2)
    assert requeue_bound("compute", allowing) == 2
    assert requeue_bound("stage-in", allowing) == requeue_bound("stage-out", allowing) == 0
    assert requeue_bound("compute", Deadlines()) == 0


def test_an_incomplete_accounting_record_is_no_contradiction():
    partial = Sighting.of(
        NativeJob(
            "42",
            ID.name,
            "",
            ID.account,
            ID.user,
            "PENDING",
            None,
            None,
            None,
            None,
            None,
            "slurmdbd",
        )
    )
    got = reconcile(RUNNING, GONE, partial, ID, T0, D)
    assert got.contradiction is None
    assert (got.facts["terminal"], got.confidence) == (False, "uncertain")
