"""The member-token owner's refusals (domain/consent.py): which end the Attempt for
good and which only defer, and the outcome saved for a permanent one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from site_runtime.domain.consent import (
    CONSENT_REFUSED,
    consent_verdict,
    permanent_reason,
    refusal_text,
)
from site_runtime.domain.slurm_refusals import stage_in_refusal_text


@pytest.mark.parametrize(
    ("status", "code", "reason", "permanent"),
    [
        # The four consent refusals of accepted-work authority.
        (403, "authorisation-refused", "project-unknown", True),
        (403, "authorisation-refused", "site-not-in-project", True),
        (403, "authorisation-refused", "binding-missing", True),
        (403, "authorisation-refused", "binding-changed", True),
        # The Attempt itself cannot go on.
        (403, "authorisation-refused", "attempt-completed", True),
        (403, "authorisation-refused", "material-without-member", True),
        # Temporary: a credential being rotated, throttling, other codes or reasons.
        (401, "unauthenticated", None, False),
        (429, "too-many-requests", None, False),
        (403, "authorisation-refused", None, False),
        (403, "authorisation-refused", "permit-expired", False),
        (403, "forbidden", "binding-changed", False),
        (404, "not-found", None, False),
        (409, "authorisation-refused", "binding-changed", False),
    ],
)
def test_which_member_token_refusals_are_permanent(status, code, reason, permanent):
    assert permanent_reason(status, code, reason) == (reason if permanent else None)


@dataclass
class Stage:
    stage: str
    state: str = "prepared"
    job_id: str | None = None
    native: dict[str, Any] | None = None
    refusal: dict[str, Any] | None = None


def _chain(**rows: Stage) -> dict[str, Stage]:
    names = {"stage_in": "stage-in", "compute": "compute", "stage_out": "stage-out"}
    return {n: rows.get(k) or Stage(n) for k, n in names.items()}


def _done(stage: str, job: str) -> Stage:
    return Stage(stage, "submitted", job, {"state": "COMPLETED", "terminal": True})


@pytest.mark.parametrize(
    ("rows", "stage", "job_id", "state"),
    [
        ({}, "stage-in", None, None),
        ({"stage_in": _done("stage-in", "11")}, "compute", None, None),
        (
            {
                "stage_in": _done("stage-in", "11"),
                "compute": Stage("compute", "submitted", "12", {"state": "RUNNING"}),
            },
            "compute",
            "12",
            "RUNNING",
        ),
        (
            {"stage_in": _done("stage-in", "11"), "compute": _done("compute", "12")},
            "stage-out",
            None,
            None,
        ),
    ],
)
def test_a_permanent_refusal_fails_the_first_stage_not_completed(rows, stage, job_id, state):
    verdict = consent_verdict(_chain(**rows))
    assert verdict.phase == "failed" and verdict.native_state == state
    assert verdict.failure == {
        "stage": stage,
        "scheduler_state": state,
        "job_id": job_id,
        "exit_code": None,
        "signal": None,
        "code": CONSENT_REFUSED,
    }


def test_the_refusal_text_names_only_the_reason_code():
    text = stage_in_refusal_text(
        CONSENT_REFUSED, {"code": CONSENT_REFUSED, "reason": "binding-changed"}
    )
    assert text == refusal_text("binding-changed")
    assert "binding-changed" in text
