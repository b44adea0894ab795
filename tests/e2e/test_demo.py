"""``scripts/demo`` end to end: "Run all in order" of examples/demo-repo (train,
then evaluate on the commit train pushed) with the local executor and on the
Slurm lab, checked through the one JSON line it ends with."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.conftest import ENV, ROOT, metallo

pytestmark = pytest.mark.e2e


def run_demo(executor: str) -> dict:
    state = metallo("dev", "status", "--output", "json", timeout=60)
    if state.code == 0 and state.json()["executor"] != executor:
        metallo("dev", "down", timeout=180)
    done = subprocess.run([str(ROOT / "scripts" / "demo"), "--executor", executor], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, f"the demo must print exactly one line on stdout: {done.stdout!r}"
    return json.loads(lines[0])


def check_summary(summary: dict, executor: str) -> None:
    assert summary["state"] == "succeeded"
    steps = summary["steps"]
    assert [s["action"] for s in steps] == ["train", "evaluate"]
    for s in steps:
        assert s["state"] == "succeeded" and s["site"] == "lab-slurm"
        assert s["executor"] == executor
        assert [j["stage"] for j in s["native_jobs"]] == ["stage-in", "compute", "stage-out"]
        assert all(j["job_id"] for j in s["native_jobs"])
        assert len(s["input_commit"]) == 40 and len(s["output_commit"]) == 40
    # the hand-off: evaluate ran on exactly the commit train pushed
    assert steps[1]["input_commit"] == steps[0]["output_commit"]
    metrics = summary["metrics"]
    assert metrics["rows"] == 40
    assert metrics["r2"] > 0.99  # the data are linear with small noise
    assert abs(metrics["weights"][0] - 3) < 0.1 and abs(metrics["weights"][1] + 2) < 0.1


def test_demo_pipeline_on_the_local_executor():
    check_summary(run_demo("local"), "local")


@pytest.mark.slurm
def test_demo_pipeline_on_the_slurm_lab():
    from tests.slurm.lab import lab_problem

    problem = lab_problem()
    if problem:
        pytest.fail(problem)
    summary = run_demo("slurm")
    check_summary(summary, "slurm")
    # Slurm job ids are numbers, distinct per stage
    ids = [j["job_id"] for s in summary["steps"] for j in s["native_jobs"]]
    assert all(i.isdigit() for i in ids) and len(set(ids)) == len(ids)
