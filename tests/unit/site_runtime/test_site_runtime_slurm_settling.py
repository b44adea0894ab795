"""Settling a lost submission and sweeping held duplicates (domain/slurm_settling.py),
and cancellation order and answers (domain/slurm_cancellation.py). No Slurm needed."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

import pytest

from site_runtime.domain.slurm_cancellation import (
    CancelStep,
    cancellation_order,
    fold_answers,
    settled_answer,
)
from site_runtime.domain.slurm_jobs import NativeJob, stage_identity
from site_runtime.domain.slurm_settling import held_duplicates, settle_submission

IDENTITY = stage_identity("metallo", "run-1", "att-1", "compute", "demo", "alice")


def job(job_id: str, state: str = "PENDING", reason: str | None = "JobHeldUser", **kw) -> NativeJob:
    fields = {
        "name": IDENTITY.name,
        "comment": IDENTITY.comment,
        "account": IDENTITY.account,
        "user": IDENTITY.user,
    }
    fields.update(kw)
    return NativeJob(
        job_id,
        state=state,
        reason=reason,
        exit_code=None,
        signal=None,
        partition=None,
        dependency=None,
        source="slurmctld",
        **fields,
    )


@pytest.mark.parametrize(
    ("matches", "verdict", "adopted", "held", "cancel"),
    [
        ([], "absent", None, False, ()),
        ([job("7")], "adopt", "7", True, ()),
        ([job("7", reason="Dependency")], "adopt", "7", False, ()),  # released already
        ([job("7", "RUNNING", None)], "adopt", "7", False, ()),
        ([job("7", "COMPLETED", None)], "adopt", "7", False, ()),
        # several, all held: keep the oldest, cancel the others first
        ([job("12"), job("9"), job("10")], "adopt", "9", True, ("12", "10")),
        # several, one released or ran: nothing is guessed
        ([job("9"), job("10", "RUNNING", None)], "ambiguous", None, False, ()),
        ([job("9"), job("10", "COMPLETED", None)], "ambiguous", None, False, ()),
    ],
)
def test_settle_submission(matches, verdict, adopted, held, cancel):
    settled = settle_submission(matches)
    assert settled.verdict == verdict
    assert (settled.job.job_id if settled.job else None) == adopted
    assert (settled.held, settled.cancel) == (held, cancel)


def test_held_duplicates_are_found_by_exact_identity_only():
    jobs = [
        job("5"),  # the saved job itself
        job("6"),  # a held duplicate
        job("7", "RUNNING", None),  # carries the identity but runs: not a held duplicate
        job("8", comment="metallo:run-1:att-1:stage-in"),  # another stage
        job("9", user="bob"),  # another user
    ]
    assert held_duplicates(IDENTITY, jobs, "5") == ["6"]
    assert held_duplicates(IDENTITY, jobs, None) == ["5", "6"]


@dataclass
class Stage:
    stage: str
    job_id: str | None = None
    native: dict[str, Any] | None = None
    state: str = "submitted"
    refusal: dict[str, Any] | None = None


STAGES = ("stage-in", "compute", "stage-out")


@pytest.mark.parametrize(
    "submitted",
    [c for n in range(4) for c in combinations(STAGES, n)],
)
def test_cancellation_of_every_subset_of_submitted_stages_is_newest_first(submitted):
    rows = {
        s: Stage(
            s,
            str(i + 1) if s in submitted else None,
            {"terminal": True} if s == "stage-in" else None,
        )
        for i, s in enumerate(STAGES)
    }
    order = cancellation_order(rows)
    expected = [s for s in reversed(STAGES) if s in submitted]
    assert [step.stage for step in order] == expected
    assert all(step.job_id == str(STAGES.index(step.stage) + 1) for step in order)
    assert [step.ended for step in order] == [s == "stage-in" for s in expected]
    answers = ["already-terminal" if step.ended else "accepted" for step in order]
    folded = fold_answers(answers)
    if not submitted:
        assert folded == "not-found"
    elif submitted == ("stage-in",):
        assert folded == "already-terminal"
    else:
        assert folded == "accepted"


def test_cancel_step_is_a_plain_value():
    assert CancelStep("compute", "2", False) == CancelStep("compute", "2", False)


@pytest.mark.parametrize(
    ("answer", "seen", "settled"),
    [
        ("accepted", None, "accepted"),
        ("already-terminal", None, "already-terminal"),
        ("already-terminal", job("1", "COMPLETED", None), "already-terminal"),
        # stopped by an earlier, interrupted run of the same cancellation
        ("already-terminal", job("1", "CANCELLED", None), "accepted"),
        ("not-found", None, None),  # 404 and no record: not proof of absence
        ("not-found", job("1", "FAILED", None), "already-terminal"),
        ("not-found", job("1", "PENDING", None), "accepted"),
    ],
)
def test_settled_answer(answer, seen, settled):
    assert settled_answer(answer, seen) == settled


@pytest.mark.parametrize(
    ("answers", "folded"),
    [
        ([], "not-found"),
        (["already-terminal"], "already-terminal"),
        (["already-terminal", "already-terminal"], "already-terminal"),
        (["already-terminal", "accepted"], "accepted"),
        (["accepted", "accepted", "accepted"], "accepted"),
    ],
)
def test_fold_answers(answers, folded):
    assert fold_answers(answers) == folded
