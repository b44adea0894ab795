"""Smoke run of benchmarks/observe.py on the Slurm lab (one cycle, 6 vs 2 Attempts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_observe_benchmark_prints_one_json_line_with_flat_requests(slurm_lab):
    out = (
        subprocess.run(
            [sys.executable, "-m", "benchmarks.observe", "--smoke"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        .stdout.strip()
        .splitlines()
    )
    assert len(out) == 1, out
    line = json.loads(out[0])
    assert (line["benchmark"], line["small_attempts"], line["large_attempts"]) == ("observe", 2, 6)
    # One shared job list per cycle, whatever the number of Attempts.
    assert line["small_requests_per_cycle"] == line["large_requests_per_cycle"] == 1
    assert line["large_cpu_seconds_per_cycle"] > 0
