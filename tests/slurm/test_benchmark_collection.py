"""benchmarks/collection.py in its smoke size on the Slurm lab: one start-array beside
one chain per child in the same run, every job cancelled afterwards."""

from __future__ import annotations

import subprocess

import pytest

from tests.benchmark_runner import measured, run_benchmark

pytestmark = pytest.mark.slurm


def test_collection_benchmark_measures_arrays_beside_chains(slurm_lab):
    line = run_benchmark("collection", "--smoke", timeout=300)
    assert (line["benchmark"], line["children"]) == ("collection", 4), line
    # Slurm itself lists three arrays for the one start-array, and each chain's start
    # made its stage-in job (its later stages come as its stages complete).
    assert line["arrays_native_jobs"] == 3, line
    assert line["chains_native_jobs"] == 4, line
    assert line["chains_requests"] >= 8 and line["arrays_requests"] < line["chains_requests"]
    for key in ("arrays_seconds", "arrays_submitted_seconds", "chains_seconds", "chains_submitted_seconds",
                "request_ratio", "speedup", "submitted_speedup"):
        assert measured(line[key]), (key, line)
    left = subprocess.run(["squeue", "-h", "-u", "alice", "-o", "%j"], capture_output=True,
                          text=True, check=True).stdout
    assert not [name for name in left.split() if name.startswith("bench-")]
