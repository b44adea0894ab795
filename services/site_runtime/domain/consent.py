"""The member-token owner's refusals (seed 001; docs/site-runtime.md, Member tokens).

The Site edge issues an Attempt's member token only while accepted-work authority
holds. Its answers fall in two kinds:

- **permanent**: a 403 ``authorisation-refused`` whose ``reason`` says the member
  can never act for this Attempt again — the four consent refusals
  (``project-unknown``, ``site-not-in-project``, ``binding-missing``,
  ``binding-changed``) and the two that say the Attempt itself cannot go on
  (``attempt-completed``, ``material-without-member``). The Attempt ends with the
  fixed failure code :data:`CONSENT_REFUSED`; waiting cannot cure it, so it must
  never hold the Site's stream.
- **temporary**: anything else (401 while a credential rotates, 429, another code
  or reason): the same stage is deferred and tried again.

Only codes enter a refusal: never the edge's message, issuer text or a token.
"""

from __future__ import annotations

from collections.abc import Mapping

from site_runtime.domain.outcomes import failure_record
from site_runtime.domain.slurm_chain import StageView, Verdict
from site_runtime.domain.slurm_stages import STAGES

#: The failure / refusal code of an Attempt whose member-token owner refused for good.
CONSENT_REFUSED = "member-consent-refused"

#: ``reason`` codes of a 403 ``authorisation-refused`` member-token answer that end the Attempt.
PERMANENT_REASONS = frozenset(
    {
        "project-unknown",
        "site-not-in-project",
        "binding-missing",
        "binding-changed",
        "attempt-completed",
        "material-without-member",
    }
)


def permanent_reason(status: int, code: str, reason: str | None) -> str | None:
    """The reason code when the edge's member-token refusal (HTTP ``status``, error
    ``code``, ``reason``) is permanent, else None (temporary: defer)."""
    if status == 403 and code == "authorisation-refused" and reason in PERMANENT_REASONS:
        return reason
    return None


def refusal_text(reason: str) -> str:
    """The fixed member-facing message of a consent refusal with ``reason`` (a code of
    :data:`PERMANENT_REASONS`)."""
    return f"the Site edge refused the member's token for good ({reason})"


def consent_verdict(stages: Mapping[str, StageView]) -> Verdict:
    """The outcome of an Attempt whose member token was refused for good: failed with
    :data:`CONSENT_REFUSED` on the first stage that has not completed (its job id kept
    when it has one; completed stages keep their recorded identities)."""
    for stage in STAGES:
        row = stages[stage]
        facts = row.native or {}
        if facts.get("state") != "COMPLETED":
            record = failure_record(
                stage, facts.get("state"), row.job_id, None, None, CONSENT_REFUSED
            )
            return Verdict("failed", native_state=facts.get("state"), failure=record)
    last = stages[STAGES[-1]]
    record = failure_record(STAGES[-1], "COMPLETED", last.job_id, None, None, CONSENT_REFUSED)
    return Verdict("failed", native_state="COMPLETED", failure=record)
