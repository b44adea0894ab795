"""benchmarks/machine.py: the whole machine's cost of a benchmark window (ADR 0017)."""

import os
import sys

import pytest

from benchmarks.machine import (
    Snapshot,
    group_cpu_seconds,
    machine_report,
    machine_ticks,
    process_cpu_seconds,
    transactions_per_run,
)

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_report_divides_the_window_by_the_runs_and_the_cores():
    ticks = os.sysconf("SC_CLK_TCK")
    cores = os.cpu_count()
    # 10 s of busy CPU out of 12.5 s of all cores' time, for 40 Runs.
    before = Snapshot(machine=(1000, 5000), processes={"a": 1.0, "gone": 2.0}, own=0.5,
                      groups={"postgresql": {10: 4.0, 11: 1.0}, "rabbitmq": {}})
    # Backend 11 ended in the window (not counted); backend 12 started in it.
    after = Snapshot(machine=(1000 + 10 * ticks, 5000 + int(12.5 * ticks)),
                     processes={"a": 3.0, "gone": None}, own=0.7,
                     groups={"postgresql": {10: 5.0, 12: 0.2}, "rabbitmq": {}})
    report = machine_report(before, after, 40)
    assert report["cores"] == cores
    assert report["busy_fraction"] == 0.8
    assert report["cpu_ms_per_run"] == 250.0
    assert report["cpu_bound_runs_per_second"] == round(cores / 0.25, 2)
    assert report["services_cpu_ms_per_run"] == {"a": 50.0, "gone": None}
    assert report["benchmark_client_cpu_ms_per_run"] == 5.0
    assert report["servers_cpu_ms_per_run"] == {"postgresql": 30.0, "rabbitmq": 0.0}
    assert report["other_cpu_ms_per_run"] == 250.0 - 50.0 - 30.0


def test_report_without_machine_counters_says_none():
    report = machine_report(Snapshot(machine=None), Snapshot(machine=None), 10)
    assert report["busy_fraction"] is None
    assert report["cpu_ms_per_run"] is None
    assert report["cpu_bound_runs_per_second"] is None


def test_transactions_per_run_per_database():
    assert transactions_per_run({"ec": 100, "sc": 50}, {"ec": 340, "sc": 210, "new": 9}, 10) == {
        "ec": 24.0, "sc": 16.0}
    assert transactions_per_run(None, {"ec": 1}, 10) is None
    assert transactions_per_run({"ec": 1}, {"ec": 2}, 0) is None


@linux
def test_counters_are_read_from_proc():
    groups = group_cpu_seconds()
    assert set(groups) == {"postgresql", "rabbitmq"}
    assert groups["postgresql"], "the tests' PostgreSQL runs on this machine"
    busy, total = machine_ticks()
    assert 0 < busy <= total
    sum(range(2_000_000))  # some CPU of our own
    assert process_cpu_seconds(os.getpid()) > 0
    assert process_cpu_seconds(2**22 + 7) is None  # above pid_max: no such process
