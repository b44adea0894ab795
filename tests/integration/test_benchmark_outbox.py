"""benchmarks/outbox.py in its smoke size: both paths move their messages and the
raw aio-pika baseline is measured in the same run."""

from __future__ import annotations

import pytest

from tests.benchmark_runner import measured, run_benchmark

pytestmark = pytest.mark.integration


def test_outbox_benchmark_measures_both_paths_in_one_run(amqp_url):
    result = run_benchmark("outbox", "--messages", "40", "--per-tx", "5", "--aggregates", "4",
                           "--window", "8", "--pairs", "1",
                           env={"METALLO_BENCH_AMQP_URL": amqp_url})  # the test principal
    assert measured(result["outbox_msgs_per_s"]), result
    assert measured(result["raw_msgs_per_s"]), result
    assert measured(result["ratio"]), result
    assert len(result["ratios"]) == 1, result
