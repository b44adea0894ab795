"""What one benchmark window cost the whole machine (ADR 0017).

On the benchmark machine every process of a Run shares two cores: the four services,
PostgreSQL, RabbitMQ, the Runtime and the short-lived processes a Run starts (stage
runners, ``git``, ``git-remote-https``, the lab Git server's ``git http-backend``).
Per-process accounting misses the short-lived ones, so the machine's own counters
(``/proc/stat``) are read before and after the window: when ``busy_fraction`` is near
1, the rate cannot rise above ``cpu_bound_runs_per_second`` however the work is
arranged, and only less CPU per Run helps.

The counters are the host's (or the VM's): under a cgroup CPU quota or a cpuset the
machine figures describe more than the benchmark had. Linux only (``/proc``);
elsewhere every reading is None.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: Processes counted by their name (``/proc/<pid>/comm``) rather than by pid: the
#: servers the platform runs on, with one process per connection or scheduler. Any
#: other PostgreSQL cluster on the machine counts too.
GROUPS = {"postgresql": ("postgres",), "rabbitmq": ("beam.smp", "epmd", "erl_child_setup")}


@dataclass(frozen=True)
class MachineTicks:
    """Clock ticks of all CPUs since boot: ``busy`` (user, nice, system, irq, softirq;
    guest time is inside user), ``steal`` (taken by the hypervisor) and ``total``
    (everything, idle and iowait included)."""

    busy: int
    steal: int
    total: int


def parse_cpu_line(line: str) -> MachineTicks:
    """The ``cpu`` line of ``/proc/stat`` (``cpu user nice system idle iowait irq softirq
    steal [guest guest_nice]``) as :class:`MachineTicks`. Raises ValueError for another line."""
    name, *columns = line.split()
    if name != "cpu" or len(columns) < 8:
        raise ValueError(f"not the cpu line of /proc/stat: {line[:40]!r}")
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in columns[:8])
    busy = user + nice + system + irq + softirq
    return MachineTicks(busy=busy, steal=steal, total=busy + idle + iowait + steal)


def machine_ticks() -> MachineTicks | None:
    """:func:`parse_cpu_line` of ``/proc/stat``; None without it (or unreadable)."""
    try:
        return parse_cpu_line(Path("/proc/stat").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def machine_cores() -> int:
    """The CPUs ``/proc/stat`` counts (its ``cpuN`` lines): the ones :func:`machine_ticks`
    adds up, so busy fraction and CPU-bound rate agree; ``os.cpu_count()`` without it."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return os.cpu_count() or 1
    return sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit()) or 1


@dataclass(frozen=True)
class ProcessTimes:
    """One ``/proc/<pid>/stat`` line: ``comm``, parent ``ppid``, and CPU seconds of the
    process itself (``own``: utime + stime) and of the children it has reaped
    (``children``: cutime + cstime)."""

    comm: str
    ppid: int
    own: float
    children: float


def parse_stat(raw: str) -> ProcessTimes:
    """Parse a ``/proc/<pid>/stat`` line (``man 5 proc``: fields 2 comm — which may hold
    spaces and parentheses —, 4 ppid, 14 utime, 15 stime, 16 cutime, 17 cstime, in clock
    ticks). Raises ValueError for a malformed line."""
    opened, closed = raw.find("("), raw.rfind(")")
    fields = raw[closed + 2 :].split()  # fields[0] is field 3 (state)
    if opened < 0 or closed < opened or len(fields) < 15:
        raise ValueError("malformed /proc/<pid>/stat line")
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return ProcessTimes(comm=raw[opened + 1 : closed], ppid=int(fields[1]),
                        own=(utime + stime) / _TICKS_PER_SECOND,
                        children=(cutime + cstime) / _TICKS_PER_SECOND)


def process_times(pid: int) -> ProcessTimes | None:
    """:func:`parse_stat` of ``/proc/<pid>/stat``; None when there is no such process."""
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError):
        return None


def _all_processes() -> dict[int, ProcessTimes] | None:
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found = {}
    for entry in entries:
        if entry.isdigit():
            times = process_times(int(entry))
            if times is not None:
                found[int(entry)] = times
    return found


@dataclass
class Snapshot:
    """The counters at one instant: ``machine`` ticks; ``processes``, each named
    process's (own, reaped children's) CPU seconds, None when it is not running;
    ``groups``, each :data:`GROUPS` entry's processes' own CPU seconds by pid (None
    without ``/proc``); ``own``, this process's CPU seconds."""

    machine: MachineTicks | None
    processes: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    groups: dict[str, dict[int, float]] | None = None
    own: float = 0.0

    @classmethod
    def take(cls, pids: dict[str, int], children_of: dict[str, int] | None = None) -> Snapshot:
        """Read the counters now, for the processes ``pids`` (name -> pid) and, for each
        ``children_of`` entry (name -> parent pid), the children of that parent that
        are running now, summed — (0, 0) while it has none (e.g. the Runtime's stage
        launcher, which reaps the stage runners and starts with the first stage)."""
        everything = _all_processes()
        processes: dict[str, tuple[float, float] | None] = {}
        for name, pid in pids.items():
            times = everything.get(pid) if everything is not None else process_times(pid)
            processes[name] = None if times is None else (times.own, times.children)
        for name, parent in (children_of or {}).items():
            if everything is None:
                processes[name] = None
                continue
            # None of them yet (the Runtime starts its launcher with the first stage):
            # they have spent nothing so far, which is what the window starts from.
            kids = [t for t in everything.values() if t.ppid == parent]
            processes[name] = (sum(t.own for t in kids), sum(t.children for t in kids))
        groups = None
        if everything is not None:
            groups = {name: {pid: t.own for pid, t in everything.items() if t.comm in comms}
                      for name, comms in GROUPS.items()}
        spent = os.times()
        return cls(machine=machine_ticks(), processes=processes, groups=groups,
                   own=spent.user + spent.system)


def _per_run(seconds: float, runs: int) -> float:
    return round(1000 * seconds / runs, 1)


def machine_report(before: Snapshot, after: Snapshot, runs: int) -> dict[str, Any]:
    """The window's cost in milliseconds of CPU per Run (None where a reading could not
    be taken):

    - ``cores`` (the CPUs ``/proc/stat`` counts), ``busy_fraction`` and
      ``steal_fraction`` (0..1 of all CPUs' time), ``cpu_ms_per_run`` (every process
      of the machine) and ``cpu_bound_runs_per_second`` (cores / CPU seconds per Run:
      the rate at which the machine would be 100 % busy);
    - ``services_cpu_ms_per_run``: each named process with the children it reaped
      (None: not running at one of the snapshots), of which
      ``services_children_cpu_ms_per_run`` the children alone;
    - ``servers_cpu_ms_per_run``: each :data:`GROUPS` entry — its processes alive at
      the end, from 0 for those started in the window; one that ended in the window
      counts in ``other`` — None when it had no process;
    - ``other_cpu_ms_per_run``: the rest (the Runs' stage, Git and step processes,
      ended server processes, the benchmark itself, anything else running); None
      when a named reading is missing;
    - ``benchmark_client_cpu_ms_per_run``: this process (also inside ``other``).
    """
    cores = machine_cores()
    report: dict[str, Any] = {"cores": cores, "busy_fraction": None, "steal_fraction": None,
                              "cpu_ms_per_run": None, "cpu_bound_runs_per_second": None}
    if runs <= 0:
        return report
    if before.machine and after.machine:
        busy = after.machine.busy - before.machine.busy
        total = after.machine.total - before.machine.total
        cpu_seconds = busy / _TICKS_PER_SECOND
        if total:
            report["busy_fraction"] = round(busy / total, 3)
            report["steal_fraction"] = round(
                (after.machine.steal - before.machine.steal) / total, 3)
        report["cpu_ms_per_run"] = _per_run(cpu_seconds, runs)
        report["cpu_bound_runs_per_second"] = (
            round(cores / (cpu_seconds / runs), 2) if cpu_seconds else None)
    services: dict[str, float | None] = {}
    children: dict[str, float | None] = {}
    for name, start in before.processes.items():
        end = after.processes.get(name)
        if start is None or end is None:
            services[name] = children[name] = None
        else:
            services[name] = _per_run((end[0] - start[0]) + (end[1] - start[1]), runs)
            children[name] = _per_run(end[1] - start[1], runs)
    report["services_cpu_ms_per_run"] = services
    report["services_children_cpu_ms_per_run"] = children
    servers: dict[str, float | None] = {}
    for name in GROUPS:
        now = (after.groups or {}).get(name) or {}
        then = (before.groups or {}).get(name) or {}
        if after.groups is None or not (now or then):
            servers[name] = None
        else:
            servers[name] = _per_run(sum(s - then.get(pid, 0.0) for pid, s in now.items()), runs)
    report["servers_cpu_ms_per_run"] = servers
    named = [*services.values(), *servers.values()]
    report["other_cpu_ms_per_run"] = (
        round(report["cpu_ms_per_run"] - sum(named), 1)
        if report["cpu_ms_per_run"] is not None and None not in named else None)
    report["benchmark_client_cpu_ms_per_run"] = _per_run(after.own - before.own, runs)
    return report


async def postgres_transactions() -> dict[str, int] | None:
    """Committed plus rolled-back transactions so far of each service's database
    (``pg_stat_database``), by service; None when PostgreSQL cannot be asked (a
    diagnostic: never an error). PostgreSQL publishes a busy connection's counts up to
    about 10 s late (PostgreSQL 15: ``PGSTAT_IDLE_INTERVAL``), so a reading belongs
    after a pause of :data:`SETTLE_SECONDS`."""
    try:
        import asyncpg
        from sqlalchemy.engine import make_url

        from metallo.devstack.components import SERVICES
        from metallo.persistence.engine import database_url

        urls = {service: make_url(database_url(service)) for service in SERVICES}
        names = {url.database: service for service, url in urls.items()}
        dsn = (urls[SERVICES[0]].set(drivername="postgresql", database="postgres")
               .render_as_string(hide_password=False))
        connection = await asyncpg.connect(dsn, timeout=5)
        try:
            rows = await connection.fetch(
                "SELECT datname, xact_commit + xact_rollback AS n FROM pg_stat_database"
                " WHERE datname = ANY($1::text[])", list(names), timeout=5)
        finally:
            await connection.close()
    except Exception:  # noqa: BLE001 - a report field, never a reason to lose the run
        return None
    return {names[row["datname"]]: int(row["n"]) for row in rows}


#: Seconds to wait before reading :func:`postgres_transactions`, so that every
#: connection has published its counts (PostgreSQL's 10 s idle flush interval, and 1).
SETTLE_SECONDS = 11.0


def transactions_per_run(before: dict[str, int] | None, after: dict[str, int] | None,
                         runs: int) -> dict[str, float] | None:
    """PostgreSQL transactions per Run of each service's database between two
    :func:`postgres_transactions` readings (None when either is missing). The services'
    idle polling between the readings counts too."""
    if not before or not after or runs <= 0:
        return None
    return {name: round((after[name] - before.get(name, 0)) / runs, 1)
            for name in sorted(after) if name in before}
