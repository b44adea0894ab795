"""What one benchmark window cost the whole machine (ADR 0017).

On the issue 8 machine every process of a Run shares two cores: the four services,
PostgreSQL, RabbitMQ, the Runtime and the short-lived processes a Run starts (stage
runners, ``git``, ``git-remote-https``, the lab Git server's ``git http-backend``).
Per-process accounting misses the short-lived ones, so the machine's own counters
(``/proc/stat``) are read before and after the window: when ``busy_fraction`` is near
1, the rate cannot rise above ``cpu_bound_runs_per_second`` however the work is
arranged, and only less CPU per Run helps.

Linux only (``/proc``); elsewhere every reading is None.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot from ``/proc/stat``'s ``cpu``
    line (busy: everything but idle and iowait); None without ``/proc/stat``."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    values = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of ``pid`` and of its children it has reaped (utime + stime + cutime
    + cstime from ``/proc/<pid>/stat``); None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return sum(int(v) for v in fields[11:15]) / _TICKS_PER_SECOND


#: Processes counted by their name (``/proc/<pid>/comm``) rather than by pid: the
#: servers the platform runs on, with one process per connection or scheduler.
GROUPS = {"postgresql": ("postgres",), "rabbitmq": ("beam.smp", "epmd", "erl_child_setup")}


def group_cpu_seconds() -> dict[str, dict[int, float]]:
    """CPU seconds (own, not children's) of every live process of each :data:`GROUPS`
    entry, by pid; empty groups without ``/proc``."""
    found: dict[str, dict[int, float]] = {name: {} for name in GROUPS}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.find("(") + 1 : raw.rfind(")")]
        for name, comms in GROUPS.items():
            if comm in comms:
                fields = raw[raw.rfind(")") + 2 :].split()
                found[name][int(entry)] = (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND
    return found


@dataclass
class Snapshot:
    """The counters at one instant: machine ticks, each named process's CPU seconds
    (``pids``: name -> pid) and this process's own CPU seconds."""

    machine: tuple[int, int] | None
    processes: dict[str, float | None] = field(default_factory=dict)
    own: float = 0.0
    groups: dict[str, dict[int, float]] = field(default_factory=dict)

    @classmethod
    def take(cls, pids: dict[str, int]) -> Snapshot:
        """Read the counters now."""
        return cls(
            machine=machine_ticks(),
            processes={name: process_cpu_seconds(pid) for name, pid in pids.items()},
            own=os.times().user + os.times().system,
            groups=group_cpu_seconds(),
        )


def machine_report(before: Snapshot, after: Snapshot, runs: int) -> dict[str, Any]:
    """The window's cost: ``cores``, ``busy_fraction`` (0..1 of all cores),
    ``cpu_ms_per_run`` (every process of the machine, milliseconds of CPU per Run),
    ``cpu_bound_runs_per_second`` (cores / CPU seconds per Run: the rate at which the
    machine would be 100 % busy), ``services_cpu_ms_per_run`` (each named process with
    the children it reaped), ``servers_cpu_ms_per_run`` (each :data:`GROUPS` entry: its
    processes alive at the end, from 0 for those started in the window; an ended one
    is not counted), ``other_cpu_ms_per_run`` (the rest of the machine: the Runs'
    stage, Git and step processes, the benchmark itself, everything else running) and
    ``benchmark_client_cpu_ms_per_run`` (this process). Readings that could not be
    taken are None."""
    cores = os.cpu_count() or 1
    report: dict[str, Any] = {"cores": cores, "busy_fraction": None, "cpu_ms_per_run": None,
                              "cpu_bound_runs_per_second": None}
    if before.machine and after.machine and runs > 0:
        busy = after.machine[0] - before.machine[0]
        total = after.machine[1] - before.machine[1]
        cpu_seconds = busy / _TICKS_PER_SECOND
        report["busy_fraction"] = round(busy / total, 3) if total else None
        report["cpu_ms_per_run"] = round(1000 * cpu_seconds / runs, 1)
        report["cpu_bound_runs_per_second"] = (
            round(cores / (cpu_seconds / runs), 2) if cpu_seconds else None)
    services = {}
    for name, start in before.processes.items():
        end = after.processes.get(name)
        services[name] = (round(1000 * (end - start) / runs, 1)
                          if start is not None and end is not None and runs else None)
    report["services_cpu_ms_per_run"] = services
    servers = {}
    for name, now in after.groups.items():
        then = before.groups.get(name, {})
        spent = sum(seconds - then.get(pid, 0.0) for pid, seconds in now.items())
        servers[name] = round(1000 * spent / runs, 1) if runs else None
    report["servers_cpu_ms_per_run"] = servers
    known = [v for v in (*services.values(), *servers.values()) if v is not None]
    report["other_cpu_ms_per_run"] = (
        round(report["cpu_ms_per_run"] - sum(known), 1)
        if report["cpu_ms_per_run"] is not None else None)
    report["benchmark_client_cpu_ms_per_run"] = (
        round(1000 * (after.own - before.own) / runs, 1) if runs else None)
    return report


SERVICES = ("workload_portfolio", "execution_core", "site_coordination", "pipeline_coordination")


async def postgres_transactions() -> dict[str, int] | None:
    """Committed plus rolled-back transactions so far of each service's database
    (``pg_stat_database``; PostgreSQL publishes a backend's counts within about a
    second of its transactions, so read them after a pause). None when PostgreSQL
    cannot be asked."""
    import asyncpg
    from sqlalchemy.engine import make_url

    from metallo.persistence.engine import database_url

    dsn = (make_url(database_url(SERVICES[0])).set(drivername="postgresql", database="postgres")
           .render_as_string(hide_password=False))
    try:
        connection = await asyncpg.connect(dsn, timeout=5)
    except (OSError, asyncpg.PostgresError):
        return None
    try:
        rows = await connection.fetch(
            "SELECT datname, xact_commit + xact_rollback AS n FROM pg_stat_database"
            " WHERE datname = ANY($1::text[])", [f"metallo_{s}" for s in SERVICES])
    finally:
        await connection.close()
    return {row["datname"].removeprefix("metallo_"): int(row["n"]) for row in rows}


def transactions_per_run(before: dict[str, int] | None, after: dict[str, int] | None,
                         runs: int) -> dict[str, float] | None:
    """PostgreSQL transactions per Run of each service's database between two
    :func:`postgres_transactions` readings (None when either is missing)."""
    if not before or not after or runs <= 0:
        return None
    return {name: round((after[name] - before.get(name, 0)) / runs, 1)
            for name in sorted(after) if name in before}
