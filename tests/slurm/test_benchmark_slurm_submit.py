"""benchmarks/slurm_submit.py in its smoke size on the Slurm lab: held jobs submitted
through the Runtime's adaptor beside raw slurmrestd POSTs in the same run, and
every one cancelled afterwards."""

from __future__ import annotations

import subprocess

import pytest

from tests.benchmark_runner import measured, run_benchmark

pytestmark = pytest.mark.slurm


def _bench_jobs() -> list[str]:
    done = subprocess.run(["squeue", "--noheader", "--format=%j"], capture_output=True,
                          text=True, check=True)
    return [name for name in done.stdout.split() if name.startswith("bench-")]


def test_slurm_submit_benchmark_measures_both_sides(slurm_lab):
    result = run_benchmark("slurm_submit", "--jobs", "8", "--concurrency", "2", "--rounds", "2")
    assert result["benchmark"] == "slurm_submit" and result["jobs"] == 8, result
    assert result["rounds"] == 2 and len(result["round_ratios"]) == 2, result
    assert all(measured(r) for r in result["round_ratios"]), result
    assert min(result["round_ratios"]) <= result["median_round_ratio"], result
    assert measured(result["raw_per_second"]), result
    assert measured(result["adaptor_per_second"]), result
    assert measured(result["ratio"]), result
    assert _bench_jobs() == []
