"""docs/actions.md, Repository inputs: Workload Portfolio accepts ``inputs`` for a
``slurm-job`` (and every type), and each Site Runtime executor refuses an Attempt that
lists any at ``prepare`` with the code and message the table there gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from site_runtime.adaptors.slurm.material import Refusal, prepared_record
from site_runtime.adaptors.slurm.settings import SlurmSettings
from site_runtime.application.ports import SiteCommand
from site_runtime.domain.kubernetes_batch import parse_kubernetes_job
from site_runtime.domain.local_batch import InvalidMaterial, parse_job
from tests.unit.site_runtime.kubernetes_support import SITE, payload
from workload_portfolio.application.actions_file import parse_actions_file

DOC = Path(__file__).resolve().parents[2] / "docs" / "actions.md"
INPUT = {"name": "data", "url": "https://git.example.org/lab/datasets.git", "path": "data",
         "commit": "a" * 40}
SLURM_ENV = {"SLURM_JWT_ISSUER": "https://issuer", "SLURM_JWT_AUTHORIZED_PARTY": "metallo",
             "SLURM_JWKS_URL": "file:/x", "RUNTIME_STATE_DIRECTORY": "/tmp/x"}


def documented() -> dict[str, tuple[str, str]]:
    """executor → (reason, why) from the table under "No Site checks inputs out yet"."""
    text = DOC.read_text().split("**No Site checks inputs out yet.**", 1)[1]
    rows = re.findall(r"^\| (\w+) \([^|]*\) \| `([a-z-]+)` \| ([^|]+) \|$", text, flags=re.M)
    return {executor: (code, why.strip()) for executor, code, why in rows}


def refusal(executor: str) -> tuple[str, str]:
    """What ``executor`` answers to a prepare whose spec lists one input."""
    body = payload(inputs=[INPUT])
    try:
        if executor == "kubernetes":
            parse_kubernetes_job(body, SITE)
        elif executor == "local":
            parse_job(body)
        else:
            command = SiteCommand(1, "c-1", "prepare", "lab-slurm", "slurm", "r-1", "a-1", 1,
                                  {**body, "action_type": "slurm-job"})
            prepared_record(command, SlurmSettings.from_env(SLURM_ENV), clock=lambda: 0.0)
    except (InvalidMaterial, Refusal) as refused:
        code = refused.code
        return code, getattr(refused, "message", None) or str(refused)
    raise AssertionError(f"the {executor} executor accepted inputs")


def test_a_slurm_job_with_inputs_is_accepted_by_workload_portfolio():
    parsed = parse_actions_file(
        "version: 1\nactions:\n  train:\n    type: slurm-job\n    command: [python, t.py]\n"
        "    inputs:\n      - {name: data, url: 'https://git.example.org/lab/d.git', "
        "branch: main}\n")
    assert parsed.action("train")["inputs"][0]["name"] == "data"


@pytest.mark.parametrize("executor", ["slurm", "kubernetes", "local"])
def test_every_executor_refuses_inputs_as_documented(executor):
    assert refusal(executor) == documented()[executor]
