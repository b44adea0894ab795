"""The Job-create benchmark's smoke mode runs in the suite (benchmarks/k8s_submit.py)."""

from __future__ import annotations

import pytest

from tests.benchmark_runner import measured, run_benchmark

pytestmark = pytest.mark.k8s


def test_the_benchmark_prints_one_json_line_with_both_rates(k8s_lab):
    result = run_benchmark("k8s_submit", "--smoke", timeout=300)
    assert result["benchmark"] == "k8s_submit" and result["jobs"] == 16
    assert measured(result["raw_per_second"]) and measured(result["executor_per_second"])
    assert result["ratio"] == pytest.approx(
        result["executor_per_second"] / result["raw_per_second"], abs=0.01
    )
