"""The observation of a ``k8s-job`` Attempt (docs/site-commands.md) from its journal state
and what its Job and Pods say, and the stage helper's exit protocol. Pure.

Phases: ``prepared`` (before start), ``queued`` (stage-in, or the Job's Pod not running
yet — with the Pod's native-wait code), ``running`` (compute and stage-out), then
``succeeded`` / ``failed`` / ``cancelled`` with the deciding stage's failure record or
the output commit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from site_runtime.domain import outcomes
from site_runtime.domain.kubernetes_status import StageState

#: The stage helper's exit status → failure code (0 is success). The helper prints
#: its outcome as a last log line too (:data:`RESULT_PREFIX`), which carries the
#: output commit; the exit status alone decides success.
HELPER_EXITS = {
    10: "stage-in-failed",
    11: "repository-commit-missing",
    12: "stage-out-failed",
    13: "wall-time-exceeded",
    14: "cancelled",
}
HELPER_EXIT_OF = {code: status for status, code in HELPER_EXITS.items()}
RESULT_PREFIX = "metallo-stage-result "
_HEX40 = re.compile(r"^[0-9a-f]{40}$")

#: ``observation.failure.code`` values of a failed Attempt (docs/site-runtime.md).
FAILURES = {
    "stage-in-failed": "the preparation Pod could not fetch or check out the repository",
    "repository-commit-missing": "the repository does not have the pinned commit",
    "compute-failed": "a pre-command or the command exited non-zero or died by a signal",
    "wall-time-exceeded": "the Job ran longer than wallTimeSeconds (activeDeadlineSeconds)",
    "stage-out-failed": "the stage-out Pod could not commit or push the results",
    "kubernetes-object-lost": "a Job or Pod the Attempt created is gone without an end",
    "authorisation-refused": "the Site edge refused a repository grant the stage needed",
    "attempt-deadline-passed": "stage-in ended after the deadline, so the Job was not created",
    "native-request-denied": "the API refused a create of a later stage (403 Forbidden)",
    "native-request-invalid": "the API refused a create of a later stage (422 Invalid)",
}

PHASE_OF_STATE = {
    "prepared": "prepared",
    "stage-in": "queued",
    "compute": "running",
    "stage-out": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "cancelled",
}


def helper_failure(exit_code: int | None) -> str | None:
    """The failure code a helper's exit status stands for (None for 0)."""
    if exit_code == 0:
        return None
    return HELPER_EXITS.get(exit_code or -1)


def output_commit(log_tail: str) -> str | None:
    """The output commit from the stage-out helper's result line, or None when it
    pushed nothing or the line is missing or malformed."""
    for line in reversed(log_tail.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                outcome = json.loads(line[len(RESULT_PREFIX) :])
            except ValueError:
                return None
            commit = outcome.get("output_commit") if isinstance(outcome, dict) else None
            return commit if isinstance(commit, str) and _HEX40.match(commit) else None
    return None


@dataclass(frozen=True)
class StageEnd:
    """How one stage ended, as the journal keeps it."""

    stage: str
    name: str
    exit_code: int | None
    signal: int | None
    code: str | None


def failure_record(end: StageEnd, scheduler_state: str) -> dict[str, Any]:
    """The bounded failure record (stage, state, object name, exit code, signal, code):
    never provider text or secrets."""
    return outcomes.failure_record(
        end.stage, scheduler_state, end.name, end.exit_code, end.signal, end.code
    )


def observation(
    state: str,
    *,
    ends: list[StageEnd],
    current: StageState | None,
    output: str | None,
    observed_at: str,
) -> dict[str, Any]:
    """The observation of docs/site-commands.md. ``ends`` are the stages that ended, in
    order; ``current`` is the running stage's native state (None when not known);
    ``output`` the pushed commit. ``native_wait`` carries a native-wait code while a
    Pod waits (seed 001), never provider text."""
    phase = PHASE_OF_STATE[state]
    native = current.native_state if current is not None else state.upper()
    wait = current.wait_code if current is not None and not current.ended else None
    if state == "compute" and current is not None and current.state == "pending":
        phase = "queued"
    exit_code = signal = None
    failure = None
    if state in ("failed", "cancelled"):
        last = next((e for e in reversed(ends) if e.code), ends[-1] if ends else None)
        if last is not None:
            exit_code, signal = last.exit_code, last.signal
            if state == "failed":
                failure = failure_record(
                    last, "FAILED" if last.code != "wall-time-exceeded" else "DeadlineExceeded"
                )
        native = "Failed" if state == "failed" else "Cancelled"
    if state == "succeeded":
        compute = next((e for e in ends if e.stage == "compute"), None)
        if compute is not None:
            exit_code, signal = compute.exit_code, compute.signal
        native = "Complete"
    return {
        **outcomes.observation(
            phase,
            observed_at,
            native_state=native,
            exit_code=exit_code,
            signal=signal,
            failure=failure,
            output_commit=output if state == "succeeded" else None,
        ),
        "native_wait": wait,
    }
