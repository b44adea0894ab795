"""benchmarks/site_edge.py in its smoke size: commands pulled and recorded through the
real edge over TLS, beside the bare HTTPS round trips measured in the same run."""

from __future__ import annotations

import pytest

from tests.benchmark_runner import measured, run_benchmark

pytestmark = pytest.mark.integration


def test_site_edge_benchmark_measures_commands_and_round_trips():
    result = run_benchmark("site_edge", "--commands", "16")
    assert result["benchmark"] == "site_edge" and result["transport"] == "https"
    for key, runtimes in (("runtimes_1", 1), ("runtimes_8", 8)):
        part = result[key]
        assert part["runtimes"] == runtimes, part
        assert part["commands"] > 0, part
        for rate in ("commands_per_s", "round_trips_per_s", "get_then_post_per_s", "ratio"):
            assert measured(part[rate]), (key, rate, part)
    assert result["ratio"] == min(result["runtimes_1"]["ratio"], result["runtimes_8"]["ratio"])
