"""The member-facing messages of the slurm executor's ``start`` refusals
(docs/site-runtime.md, Slurm executor). Fixed text only: never scheduler or issuer
text, never a credential."""

from __future__ import annotations

from typing import Any

from site_runtime.domain.consent import CONSENT_REFUSED, refusal_text

DEADLINE_TEXT = "the Attempt's accepted-work deadline has passed"


def stage_in_refusal_text(code: str | None, refusal: dict[str, Any] | None = None) -> str:
    """Who refused the stage-in job: slurmctld (``slurm-error-<n>``,
    ``slurm-job-requeueable``), the member-token owner (``member-consent-refused``,
    with the saved ``refusal``'s reason) or the edge, which refused its repository
    grant (any other code)."""
    if code == CONSENT_REFUSED:
        return refusal_text(str((refusal or {}).get("reason") or "unknown"))
    if code and code.startswith("slurm-error-"):
        return "Slurm refused the stage-in job"
    if code == "slurm-job-requeueable":
        return "Slurm would requeue the stage-in job (the Site forces requeueing); it was cancelled"
    return f"the Site edge refused the stage-in job's repository grant ({code})"
