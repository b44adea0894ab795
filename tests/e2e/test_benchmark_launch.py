"""benchmarks/launch.py --smoke on the dev stack (local executor): its Runs complete
and the broker round trip baseline is measured in the same run."""

from __future__ import annotations

import pytest

from tests.benchmark_runner import measured, run_benchmark
from tests.e2e.conftest import ENV

pytestmark = pytest.mark.e2e


def test_launch_benchmark_smoke_completes_its_runs(local_stack):
    result = run_benchmark("launch", "--smoke", timeout=400, env=ENV)
    assert result["runs"] == 3 and result["completed"] == 3, result
    assert result["succeeded"] == 3 and result["unfinished"] == 0, result
    for key in ("runs_per_second", "launch_reply_p50_ms", "broker_round_trip_p50_ms",
                "query_round_trip_p50_ms", "launch_to_native_start_p50_s"):
        assert measured(result[key]), (key, result)
    assert result["site_stream"]["commands_per_run"], result["site_stream"]
    assert result["machine"]["settle_seconds"] == 0.0
