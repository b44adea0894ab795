"""Every runnable benchmark (``benchmarks/*.py`` with a ``__main__`` block) has a smoke
test in tests/ that runs it through ``run_benchmark``, so none can stop working
unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def runnable_benchmarks() -> set[str]:
    return {p.stem for p in (ROOT / "benchmarks").glob("*.py")
            if 'if __name__ == "__main__":' in p.read_text()}


def smoke_tested() -> set[str]:
    called = re.compile(r'run_benchmark\(\s*"([a-z_]+)"')
    return {name for p in (ROOT / "tests").rglob("test_*.py")
            for name in called.findall(p.read_text())}


def test_benchmarks_are_found():
    assert {"outbox", "site_edge", "launch", "slurm_submit"} <= runnable_benchmarks()


def test_every_benchmark_has_a_smoke_test():
    assert sorted(runnable_benchmarks() - smoke_tested()) == []
