"""Runs a benchmark (``benchmarks/<name>.py``) as its own process with small
arguments, the way an operator runs it, and returns its one JSON line.

A benchmark's contract (DESIGN.md): exit 0 and print exactly one JSON object on
stdout, the raw baseline measured in the same run. Timings are never asserted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(name: str, *args: str, timeout: float = 240,
                  env: dict[str, str] | None = None) -> dict:
    """``python -m benchmarks.<name> *args`` from the repository root; the parsed JSON
    object. Fails with the benchmark's stderr when it exits non-zero or prints
    anything but one JSON line."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *args], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"benchmarks/{name}.py exited {done.returncode}:\n{done.stderr[-4000:]}"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"benchmarks/{name}.py printed {len(lines)} lines:\n{done.stdout[-2000:]}"
    result = json.loads(lines[0])
    assert isinstance(result, dict), lines[0]
    return result


def measured(value: object) -> bool:
    """A rate or duration that was actually measured: a finite number above zero."""
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0
