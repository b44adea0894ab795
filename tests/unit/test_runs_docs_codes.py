"""docs/runs.md names every outcome, Execution Core reason and waiting code, and every
native-wait code; every failure code a Site Runtime can report is named in docs/runs.md
or docs/site-runtime.md (Failure codes). A code added without its meaning fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from execution_core.domain import reasons, states
from site_runtime.domain import kubernetes_observation, local_batch, native_waits, slurm_stages

DOCS = Path(__file__).resolve().parents[2] / "docs"
RUNS = (DOCS / "runs.md").read_text()
SITE_RUNTIME = (DOCS / "site-runtime.md").read_text()


def _strings(module, prefix: str = "") -> set[str]:
    found: set[str] = set()
    for name, value in vars(module).items():
        if not name.isupper() or not name.startswith(prefix):
            continue
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, frozenset):
            found |= {v for v in value if isinstance(v, str)}
    return found


def _named(code: str, text: str) -> bool:
    return f"`{code}`" in text


@pytest.mark.parametrize("code", sorted(_strings(reasons)))
def test_every_execution_core_reason_and_waiting_code_is_in_runs_md(code):
    assert _named(code, RUNS), f"docs/runs.md does not name `{code}`"


@pytest.mark.parametrize("code", sorted(_strings(states, "OUTCOME_")))
def test_every_outcome_is_in_runs_md(code):
    assert _named(code, RUNS), f"docs/runs.md does not name the outcome `{code}`"


@pytest.mark.parametrize("code", sorted(native_waits.NATIVE_WAIT_CODES))
def test_every_native_wait_code_is_in_runs_md(code):
    assert _named(code, RUNS), f"docs/runs.md does not name the waiting code `{code}`"


SITE_FAILURES = (
    set(slurm_stages.EXIT_CODES.values())
    | set(slurm_stages.SCHEDULER_FAILURE_CODES.values())
    | set(local_batch.FAILURES)
    | set(kubernetes_observation.FAILURES)
)


@pytest.mark.parametrize("code", sorted(SITE_FAILURES))
def test_every_site_failure_code_is_documented(code):
    assert _named(code, RUNS) or _named(code, SITE_RUNTIME), (
        f"neither docs/runs.md nor docs/site-runtime.md names the failure code `{code}`"
    )


def _section(title: str) -> str:
    start = RUNS.index(f"\n## {title}\n")
    end = RUNS.find("\n## ", start + 1)
    return RUNS[start:end if end != -1 else None]


def test_cancellation_and_lost_attempts_agree_on_a_stop_the_site_does_not_know():
    # A stop refused with an unknown-Attempt code is not done: it joins the streak, is
    # sent again and ends `lost` (domain/reconciliation.py, attempt_outcomes.stop_loop).
    from execution_core.domain import reconciliation

    assert {"cancel", "terminate"} <= set(reconciliation.ASKING_KINDS)
    lost, cancellation = _section("Lost Attempts"), _section("Cancellation")
    row = next(line for line in cancellation.splitlines()
               if line.startswith("| the Site does not know the started Attempt"))
    for code in sorted(reasons.UNKNOWN_ATTEMPT_CODES):
        assert _named(code, lost) and _named(code, row), code
    for said in (reasons.WAIT_ATTEMPT_UNKNOWN_AT_SITE, reasons.LOST_AT_SITE, reasons.MARKED_LOST):
        assert _named(said, lost) and _named(said, row), said
    assert "not done" in lost and "not done" in row and "sent again" in row
    assert "as usual" not in row
    # Neither promises that the native work of a lost Attempt is stopped.
    assert "native work is not stopped" in lost and "**not stopped**" in row
