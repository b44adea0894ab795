"""benchmarks/machine.py: the whole machine's cost of a benchmark window (ADR 0017)."""

import os
import subprocess
import sys

import pytest

from benchmarks.machine import (
    MachineTicks,
    Snapshot,
    machine_cores,
    machine_report,
    machine_ticks,
    parse_cpu_line,
    parse_stat,
    process_times,
    transactions_per_run,
)

HZ = os.sysconf("SC_CLK_TCK")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_stat_fields_are_taken_by_their_numbers_after_a_hostile_comm():
    # Field i holds i (fields 1 and 2 are the pid and the comm), so a wrong index shows.
    raw = "1 (a) (b c) " + " ".join(str(i) for i in range(3, 45))
    times = parse_stat(raw)
    assert times.comm == "a) (b c"
    assert times.ppid == 4
    assert times.own == (14 + 15) / HZ
    assert times.children == (16 + 17) / HZ
    with pytest.raises(ValueError):
        parse_stat("12 (short) S 1 2")


def test_the_cpu_line_counts_guest_time_once_and_steal_apart():
    # user nice system idle iowait irq softirq steal guest guest_nice
    ticks = parse_cpu_line("cpu  100 2 30 500 7 1 3 11 40 5")
    assert ticks == MachineTicks(busy=100 + 2 + 30 + 1 + 3, steal=11, total=136 + 500 + 7 + 11)
    with pytest.raises(ValueError):
        parse_cpu_line("cpu0 1 2 3 4 5 6 7 8")


def test_report_divides_the_window_by_the_runs_and_the_cores():
    cores = machine_cores()
    assert cores >= 1
    before = Snapshot(machine=MachineTicks(busy=1000, steal=0, total=5000),
                      processes={"a": (1.0, 0.5), "gone": (2.0, 0.0)},
                      groups={"postgresql": {10: 4.0, 11: 1.0}, "rabbitmq": {}}, own=0.5)
    # 10 s of busy CPU and 0.5 s stolen out of 12.5 s of all CPUs' time, for 40 Runs;
    # backend 11 ended in the window (not counted here), backend 12 started in it.
    after = Snapshot(machine=MachineTicks(busy=1000 + 10 * HZ, steal=HZ // 2,
                                          total=5000 + int(12.5 * HZ)),
                     processes={"a": (2.0, 1.5), "gone": None},
                     groups={"postgresql": {10: 5.0, 12: 0.2}, "rabbitmq": {}}, own=0.7)
    report = machine_report(before, after, 40)
    assert report["cores"] == cores
    assert report["busy_fraction"] == 0.8
    assert report["steal_fraction"] == 0.04
    assert report["cpu_ms_per_run"] == 250.0
    assert report["cpu_bound_runs_per_second"] == round(cores / 0.25, 2)
    assert report["services_cpu_ms_per_run"] == {"a": 50.0, "gone": None}
    assert report["services_children_cpu_ms_per_run"] == {"a": 25.0, "gone": None}
    assert report["servers_cpu_ms_per_run"] == {"postgresql": 30.0, "rabbitmq": None}
    assert report["other_cpu_ms_per_run"] is None  # "gone" and "rabbitmq" were not read
    assert report["benchmark_client_cpu_ms_per_run"] == 5.0


def test_other_is_what_the_named_processes_leave():
    before = Snapshot(machine=MachineTicks(0, 0, 0), processes={"a": (0.0, 0.0)},
                      groups={"postgresql": {1: 0.0}, "rabbitmq": {2: 0.0}})
    after = Snapshot(machine=MachineTicks(10 * HZ, 0, 20 * HZ), processes={"a": (4.0, 1.0)},
                     groups={"postgresql": {1: 2.0}, "rabbitmq": {2: 1.0}})
    report = machine_report(before, after, 10)
    assert report["other_cpu_ms_per_run"] == 1000.0 - 500.0 - 200.0 - 100.0


def test_report_without_counters_says_none():
    report = machine_report(Snapshot(machine=None), Snapshot(machine=None), 10)
    assert report["busy_fraction"] is None
    assert report["cpu_ms_per_run"] is None
    assert report["cpu_bound_runs_per_second"] is None
    assert report["servers_cpu_ms_per_run"] == {"postgresql": None, "rabbitmq": None}
    assert report["other_cpu_ms_per_run"] is None


def test_transactions_per_run_per_database():
    assert transactions_per_run({"ec": 100, "sc": 50}, {"ec": 340, "sc": 210, "new": 9}, 10) == {
        "ec": 24.0, "sc": 16.0}
    assert transactions_per_run(None, {"ec": 1}, 10) is None
    assert transactions_per_run({"ec": 1}, {"ec": 2}, 0) is None


@linux
def test_this_process_and_the_machine_are_read_from_proc():
    ticks = machine_ticks()
    assert 0 < ticks.busy <= ticks.total
    mine = process_times(os.getpid())
    assert mine.ppid == os.getppid()
    assert mine.comm  # the kernel's name of this interpreter
    assert process_times(2**22 + 7) is None  # above pid_max: no such process
    # A child that spends ≈ 0.3 s of CPU, then waits: its parent's children_of sum has it.
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n" \
           "print('burnt', flush=True)\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "burnt"
        snapshot = Snapshot.take({"me": os.getpid(), "nobody": 2**22 + 7},
                                 {"my children": os.getpid(), "its children": child.pid})
    finally:
        child.kill()
        child.wait()
    assert snapshot.processes["me"][0] > 0
    assert snapshot.processes["nobody"] is None
    assert snapshot.processes["my children"][0] >= 0.25
    assert snapshot.processes["its children"] == (0.0, 0.0)  # none yet: nothing spent so far
    assert set(snapshot.groups) == {"postgresql", "rabbitmq"}


def test_benchmark_arguments_are_bounded():
    import argparse

    from benchmarks.launch import bounded

    runs = bounded(int, 1, 10_000)
    assert runs("100") == 100
    settle = bounded(float, 0, 60)
    assert settle("0") == 0 and settle("60") == 60
    with pytest.raises(argparse.ArgumentTypeError):
        settle("60.1")
    rate = bounded(float, 0, 1_000, low_open=True)
    assert rate("0.5") == 0.5
    for parse, text in ((runs, "0"), (runs, "10001"), (runs, "x"), (rate, "0"), (rate, "-2")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
