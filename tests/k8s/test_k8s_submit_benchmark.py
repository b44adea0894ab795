"""The Job-create benchmark's smoke mode runs in the suite (benchmarks/k8s_submit.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.k8s
ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_prints_one_json_line_with_both_rates(k8s_lab):
    done = subprocess.run(
        [sys.executable, "benchmarks/k8s_submit.py", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    result = json.loads(lines[0])
    assert result["benchmark"] == "k8s_submit" and result["jobs"] == 16
    assert result["raw_per_second"] > 0 and result["executor_per_second"] > 0
    assert result["ratio"] == pytest.approx(
        result["executor_per_second"] / result["raw_per_second"], abs=0.01
    )
