"""Every code that can say why a Run waits has a member-facing text in
``metallo.waiting`` (Execution Core and the CLI must not import the Site Runtime), and
the texts agree with the owners' catalogues."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execution_core.domain import reasons
from metallo import waiting
from site_runtime.domain.deferrals import DEFERRALS
from site_runtime.domain.native_waits import NATIVE_WAIT_CODES, NATIVE_WAITS

ROOT = Path(__file__).resolve().parents[2]


def test_every_native_wait_code_has_a_text_and_no_text_lacks_its_code():
    assert set(waiting.NATIVE_WAIT_TEXTS) == set(NATIVE_WAIT_CODES) == set(NATIVE_WAITS)


def test_every_deferral_code_has_a_text():
    contract = {d["code"] for d in json.loads((ROOT / "contracts" / "deferrals.json").read_text())["deferrals"]}
    assert set(DEFERRALS) <= set(waiting.DEFERRAL_TEXTS)
    assert contract <= set(waiting.DEFERRAL_TEXTS)


def test_execution_cores_own_waiting_codes_have_a_text():
    own = {v for k, v in vars(reasons).items() if k.startswith("WAIT_")}
    assert own == set(waiting.CORE_WAIT_TEXTS) | set(waiting.PLANNING_WAIT_TEXTS)


@pytest.mark.parametrize(
    ("waiting_reason", "native_wait", "native_state", "line"),
    [
        ("", "slurm-resources", "PENDING", "pending: waiting for resources"),
        ("", "slurm-resources", "", "pending: waiting for resources"),
        ("slurm-unavailable", "", "", "Site: slurmrestd unreachable, retrying"),
        (
            "slurm-unavailable",
            "slurm-priority",
            "PENDING",
            "Site: slurmrestd unreachable, retrying · pending: waiting: other jobs have priority",
        ),
        ("attempt-unknown-at-site", "", "", "Site: does not know this Attempt, asking again "
         "(it ends lost after the reconciliation period)"),
        ("some-new-code", "", "", "Site: waiting (some-new-code)"),
        ("concurrent-run-limit", "", "", "planning: the concurrent-Run limit is reached, waiting for a slot"),
        ("", "kubernetes-new-wait", "Pending", "pending: waiting (kubernetes-new-wait)"),
        ("", "", "RUNNING", ""),
    ],
)
def test_the_waiting_line(waiting_reason, native_wait, native_state, line):
    assert waiting.waiting_text(waiting_reason, native_wait, native_state) == line
