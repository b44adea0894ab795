"""Words for how the Site ended an Attempt, built from its bounded exit facts (stage,
scheduler state) — never from scheduler text, which the Site does not pass on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CANCELLED_AT_SITE = "cancelled-at-site"
REQUEUED = "slurm-job-requeued"


def site_end_message(reason_code: str, exit_: Mapping[str, Any] | None) -> str:
    """The member-facing message of an Attempt the Site ended on its own
    (``cancelled-at-site``, ``slurm-job-requeued``); "" for any other code."""
    e = exit_ or {}
    stage = str(e.get("failure_stage") or "")
    state = str(e.get("scheduler_state") or "")
    job = f"its {stage} job" if stage else "its native work"
    seen = f" (scheduler state {state})" if state else ""
    if reason_code == CANCELLED_AT_SITE:
        return (
            f"{job} was cancelled at the Site{seen}, not by a member through Metallo: "
            "e.g. a Site administrator's or the job owner's scancel"
        )
    if reason_code == REQUEUED:
        return (
            f"the Site's scheduler requeued {job}{seen}, which would run its work again; "
            "the Site Runtime cancelled it (Slurm never re-runs Metallo's work: "
            "a new Attempt is Execution Core's)"
        )
    return ""
