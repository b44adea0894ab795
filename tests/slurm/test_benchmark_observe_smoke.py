"""Smoke run of benchmarks/observe.py on the Slurm lab (one cycle, 6 vs 2 Attempts)."""

from __future__ import annotations

import pytest

from tests.benchmark_runner import measured, run_benchmark

pytestmark = pytest.mark.slurm


def test_the_observe_benchmark_prints_one_json_line_with_flat_requests(slurm_lab):
    line = run_benchmark("observe", "--smoke", timeout=300)
    assert (line["benchmark"], line["small_attempts"], line["large_attempts"]) == ("observe", 2, 6)
    # One shared job list per cycle, whatever the number of Attempts.
    assert line["small_requests_per_cycle"] == line["large_requests_per_cycle"] == 1
    assert measured(line["large_cpu_seconds_per_cycle"])
