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
