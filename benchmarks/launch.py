"""Benchmark: N trivial Runs launched through the client contract until completed.

Needs the dev stack with the local executor (``metallo dev up --executor local``).
It publishes a repository whose one action runs ``true``, prepares it once
(PrepareAction), then sends ``--runs`` LaunchRun commands (``--concurrency`` in
flight) through :class:`RequestClient` exactly as the Go API and the CLI do, and
waits for every Run's ``RunCompleted`` event on its own queue bound to the events
exchange (as the Go API's live-update bridge does), then reads each Run once with
GetRun for its ``started_at``. Beside it, in the same run and on the same
broker, it measures the raw request/reply round trip (a message to an exclusive
queue and back, no service) and a GetRun query's round trip.

Prints one JSON line::

  {"runs", "completed", "succeeded", "failed", "unfinished", "wall_seconds",
   "runs_per_second", "concurrency", "launch_rate_per_s",
   "launch_to_native_start_p50_s", "launch_to_native_start_p95_s",
   "launch_reply_p50_ms", "query_round_trip_p50_ms", "broker_round_trip_p50_ms",
   "site_stream": {"commands_per_run", "p50_ms": {KIND: ms}, "busy_fraction",
                   "serial_bound_runs_per_second"},
   "machine": {"cores", "busy_fraction", "steal_fraction", "cpu_ms_per_run",
               "cpu_bound_runs_per_second", "services_cpu_ms_per_run": {NAME: ms},
               "services_children_cpu_ms_per_run": {NAME: ms}, "servers_cpu_ms_per_run":
               {"postgresql", "rabbitmq"}, "other_cpu_ms_per_run",
               "benchmark_client_cpu_ms_per_run", "settle_seconds",
               "postgres_transactions_per_run": {SERVICE: n}},
   "admission": {"project_concurrent_run_limit", "launch_to_planned_p50_s",
                 "planned_to_native_start_p50_s"},
   "target": {...}, "meets_target": bool}

Launch → native start is from sending LaunchRun to the Run's ``started_at``
(the Site accepted the native start; same machine, same clock).
``--rate R`` launches R Runs per second instead of all at once, to see the
latency at a load the machine sustains (no queue of waiting Runs).

Only this benchmark's Runs are waited for (a Pipeline or a demo may end Runs
beside it). ``failed``: ended and not succeeded; ``unfinished``: not ended when
read. More than ``--timeout`` seconds without every Run ended is an error that
says how many ended.

``admission`` splits that latency: a burst larger than the Project's
``concurrent_run_limit`` waits for slots (launch → planned) before the Site sees
it (planned → native start); a slot is held until Execution Core sees the Run end.
In a burst of 100 on the demo Project (10 slots) most of the p50 is this wait;
at a rate the machine sustains (``--rate 4``) the p50 is a fraction of a second.

``machine`` says what bounds the rate first (benchmarks/machine.py, ADR 0017): the
CPU every process of the machine spent in the window, per Run — services,
PostgreSQL, RabbitMQ and the short-lived stage and Git processes a Run starts —
and ``cpu_bound_runs_per_second``, cores / CPU seconds per Run. With
``busy_fraction`` near 1 the rate is at that bound, and only less CPU per Run
raises it. ``services_cpu_ms_per_run`` splits out the dev stack's processes, each
with the children it reaped (``services_children_cpu_ms_per_run``: the lab Git
server's ``git http-backend`` under ``site_coordination``, the stage runners with
their Git and step processes under ``site_runtime_stage_launcher``);
``servers_cpu_ms_per_run`` PostgreSQL's and RabbitMQ's processes, and
``other_cpu_ms_per_run`` the rest (it includes ``benchmark_client_cpu_ms_per_run``).
Every figure includes the idle stack's own background (0.07–0.1 CPU-s per second
here, spread over the services and PostgreSQL), which weighs more per Run at a low
``--rate``. ``postgres_transactions_per_run`` counts each
service database's transactions, read after pauses of ``--settle-seconds``
(default 11) outside the window, since PostgreSQL publishes counts up to 10 s late;
the services' idle polling during the second pause counts too.

``site_stream`` explains the rate: a Site's commands are handled one at a time
(seed 004, 4A; ADR 0010), so it reads the Runtime's delivery journal (read only)
for the benchmark's Runs — commands per Run, the median time from journaling to
acknowledging each kind, and ``busy_fraction``, the share of the benchmark's wall
time in which the stream was handling one of them, and
``serial_bound_runs_per_second``, 1 / the serial seconds per Run. Near 1 with the
machine's ``busy_fraction`` also near 1, the stream's commands are mostly waiting
for a core (ADR 0017): less CPU per Run shortens them; with the machine idle, the
stream itself is the bound.
Usage: .venv/bin/python -m benchmarks.launch [--runs 100] [--concurrency 16] [--rate R]
       [--timeout 600] [--settle-seconds 11] [--smoke]
(``--smoke``: a few Runs without the settle pauses, to check the benchmark still
works; tests/e2e runs it.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC
from pathlib import Path

from benchmarks.launch_figures import (
    broker_round_trips,
    percentile,
    rounded,
    site_stream,
    watch_completions,
)
from benchmarks.machine import (
    SETTLE_SECONDS,
    Snapshot,
    machine_report,
    postgres_transactions,
    transactions_per_run,
)
from metallo.cli.settings import Actor
from metallo.cli.transport import command_metadata, query_metadata
from metallo.devstack.control import status
from metallo.devstack.gitrepo import publish
from metallo.devstack.layout import Layout
from metallo.devstack.rabbitmq import GO_API, broker_url, principal
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import RequestClient, Topology
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp

#: Runs in ``--smoke`` mode (the e2e suite's check that the benchmark still runs).
SMOKE_RUNS = 3
TARGET_RUNS_PER_SECOND = 20.0
TARGET_P50_SECONDS = 1.0
WHO = Actor(member="m-alice", project="demo")
ACTIONS = """version: 1
actions:
  noop:
    type: slurm-job
    command: ["true"]
    resources: {cpus: 1, memoryMiB: 64, wallTimeSeconds: 60}
"""


def project_run_limit() -> int | None:
    """The benchmark Project's ``concurrent_run_limit`` in the dev stack's governance
    file (None: unlimited or unreadable). With the Runs' active time it bounds the rate:
    a burst waits for slots (``admission.launch_to_planned_p50_s``)."""
    try:
        from metallo.devstack.layout import REPO_ROOT
        from metallo.governance import GovernanceFile

        governance = GovernanceFile(REPO_ROOT / "examples" / "governance.yaml").current()
        project = governance.project(WHO.project)
        return project.concurrent_run_limit if project is not None else None
    except Exception:  # noqa: BLE001 - a report field, never a reason to fail the run
        return None


async def benchmark(runs: int, concurrency: int, timeout: float, launch_rate: float | None = None,
                    settle_seconds: float = SETTLE_SECONDS) -> dict:
    state = status()
    if state is None or state.get("executor") != "local":
        raise SystemExit("benchmarks/launch.py needs the dev stack with the local executor: "
                         "metallo dev up --executor local")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "actions.yaml").write_text(ACTIONS)
        url, _commit = publish(Path(tmp), f"bench-{uuid.uuid4().hex[:8]}",
                               edge_url=state["edge_url"])
    topology = Topology(prefix=state.get("topology_prefix", ""))
    # The benchmark stands in for the Go API: its principal asserts the acting member.
    go_api = broker_url(Layout.default(), state["amqp_url"], GO_API)
    client = RequestClient(go_api, topology)
    await client.start()
    ended: set[str] = set()  # every Run that ended, this benchmark's or another client's
    launched: dict[str, float] = {}
    all_ended = asyncio.Event()

    def check_all_ended() -> None:
        # Only this benchmark's Runs count: a Pipeline or a demo may run beside it.
        if len(launched) == runs and ended.issuperset(launched):
            all_ended.set()

    def on_completed(event: ec.RunCompleted) -> None:
        ended.add(event.run_id)
        check_all_ended()

    watcher = await watch_completions(go_api, topology, on_completed)
    try:
        prepared = await client.request(wp.PrepareAction(
            metadata=command_metadata(WHO), repository_url=url, branch="main", action="noop"),
            timeout=60)
        limit = asyncio.Semaphore(concurrency)
        reply_times: list[float] = []

        async def launch(index: int) -> None:
            if launch_rate:  # a steady arrival rate instead of one burst
                await asyncio.sleep(index / launch_rate)
            async with limit:
                sent_wall, sent = time.time(), time.perf_counter()
                reply = await client.request(ec.LaunchRun(
                    metadata=command_metadata(WHO), workload_id=prepared.workload_id,
                    revision=prepared.revision), timeout=60)
                reply_times.append(time.perf_counter() - sent)
                launched[reply.run_id] = sent_wall
                check_all_ended()  # its RunCompleted may have come before the reply

        pids = {name: c["pid"] for name, c in state.get("components", {}).items()
                if isinstance(c, dict) and isinstance(c.get("pid"), int)}
        if isinstance(state.get("pid"), int):
            pids["devstack_supervisor"] = state["pid"]  # it relays every log line
        # The Runtime's one long-lived child is its stage launcher, which reaps the runners.
        launcher = ({"site_runtime_stage_launcher": pids["site_runtime"]}
                    if "site_runtime" in pids else {})
        await asyncio.sleep(settle_seconds)  # the preparation's transactions are published
        xacts_before = await postgres_transactions()
        cpu_before = Snapshot.take(pids, launcher)
        began = time.perf_counter()
        tasks = [asyncio.ensure_future(launch(i)) for i in range(runs)]
        tasks.append(asyncio.ensure_future(all_ended.wait()))
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), timeout)
        except Exception as error:  # a timeout, or a launch refused or unanswered
            for task in tasks:  # no more launches after a failure
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            done = len(ended.intersection(launched))
            what = (f"within {timeout:g} s" if isinstance(error, TimeoutError)
                    else f"before a launch failed ({type(error).__name__}: {error})")
            raise SystemExit(
                f"benchmarks/launch.py: {done} of {runs} Runs ended {what}; {len(launched)} "
                "were launched; `metallo run list` shows where they are") from None
        wall = time.perf_counter() - began
        cpu_after = Snapshot.take(pids, launcher)
        await asyncio.sleep(settle_seconds)  # and the window's
        xacts_after = await postgres_transactions()
        # One GetRun per Run at the end, for its started_at (outside the wall time).
        finished: dict[str, ec.Run] = {}
        query_times: list[float] = []

        async def read(run_id: str) -> None:
            async with limit:
                start = time.perf_counter()
                finished[run_id] = await client.request(
                    ec.GetRun(metadata=query_metadata(WHO), run_id=run_id), timeout=30)
                query_times.append(time.perf_counter() - start)

        await asyncio.gather(*(read(r) for r in launched))
        starts = [r.started_at.ToDatetime(tzinfo=UTC).timestamp() - launched[rid]
                  for rid, r in finished.items() if r.started_at.seconds]
        planned = [r.planned_at.ToDatetime(tzinfo=UTC).timestamp() - launched[rid]
                   for rid, r in finished.items() if r.planned_at.seconds]
        planned_to_start = [
            (r.started_at.ToDatetime(tzinfo=UTC) - r.planned_at.ToDatetime(tzinfo=UTC))
            .total_seconds()
            for r in finished.values() if r.started_at.seconds and r.planned_at.seconds]
    finally:
        await watcher.close()
        await client.close()
    # The baseline round trip needs the default exchange: a service's login may use it
    # (its own queue names, <service>.*); no member client's may.
    broker = await broker_round_trips(
        broker_url(Layout.default(), state["amqp_url"], principal("execution_core")), 200,
        f"{topology.prefix}execution_core.bench-rtt-{uuid.uuid4().hex[:8]}")
    stream = site_stream(Layout.default().runtime / "local" / "delivery.sqlite", set(launched), wall)
    outcomes = [r.outcome for r in finished.values() if r.phase == "terminal"]
    unfinished = len(finished) - len(outcomes)
    rate = len(finished) / wall if wall else 0.0
    p50 = percentile(starts, 0.5)
    return {
        "runs": runs, "completed": len(outcomes),
        "succeeded": outcomes.count("succeeded"),
        "failed": len(outcomes) - outcomes.count("succeeded"), "unfinished": unfinished,
        "wall_seconds": round(wall, 3), "runs_per_second": round(rate, 3),
        "launch_to_native_start_p50_s": round(p50, 3) if p50 is not None else None,
        "launch_to_native_start_p95_s": (round(percentile(starts, 0.95), 3) if starts else None),
        "launch_reply_p50_ms": round(1000 * statistics.median(reply_times), 2),
        "query_round_trip_p50_ms": (round(1000 * statistics.median(query_times), 2)
                                    if query_times else None),
        "broker_round_trip_p50_ms": round(1000 * statistics.median(broker), 3),
        "site_stream": stream,
        "machine": {**machine_report(cpu_before, cpu_after, runs),
                    "settle_seconds": settle_seconds,
                    "postgres_transactions_per_run": transactions_per_run(
                        xacts_before, xacts_after, runs)},
        "admission": {
            "project_concurrent_run_limit": project_run_limit(),
            "launch_to_planned_p50_s": rounded(percentile(planned, 0.5)),
            "planned_to_native_start_p50_s": rounded(percentile(planned_to_start, 0.5)),
        },
        "concurrency": concurrency,
        "launch_rate_per_s": launch_rate,
        "target": {"runs_per_second": TARGET_RUNS_PER_SECOND,
                   "launch_to_native_start_p50_s": TARGET_P50_SECONDS},
        "meets_target": bool(rate >= TARGET_RUNS_PER_SECOND and p50 is not None
                             and p50 <= TARGET_P50_SECONDS and len(outcomes) == runs),
    }


def bounded(kind: type, low: float, high: float, *, low_open: bool = False):
    """An argparse type: ``kind(text)`` within ``low..high`` (``low`` excluded when
    ``low_open``), else a usage error naming the range."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (low < value if low_open else low <= value) or value > high:
            shown = f"> {low:g}" if low_open else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"{text} is out of range ({shown} and <= {high:g})")
        return value
    return parse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=bounded(int, 1, 10_000), default=100)
    parser.add_argument("--concurrency", type=bounded(int, 1, 1_000), default=16,
                        help="launch requests in flight at once")
    parser.add_argument("--rate", type=bounded(float, 0, 1_000, low_open=True), default=None,
                        help="launches per second (default: all at once, as one burst)")
    parser.add_argument("--timeout", type=bounded(float, 0, 86_400, low_open=True),
                        default=600.0, help="seconds to wait for the end")
    parser.add_argument("--settle-seconds", type=bounded(float, 0, 60), default=SETTLE_SECONDS,
                        help="pause before each PostgreSQL transaction count, outside the "
                             "measured window (PostgreSQL publishes counts up to 10 s late; "
                             "0: faster, the counts approximate)")
    parser.add_argument("--smoke", action="store_true",
                        help=f"a short check that the benchmark still works: {SMOKE_RUNS} Runs, "
                             "no settle pauses (the figures are not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.concurrency, args.settle_seconds = SMOKE_RUNS, 2, 0.0
        args.timeout = min(args.timeout, 180.0)
    if args.rate and args.runs / args.rate >= args.timeout:
        parser.error(f"--runs {args.runs} at --rate {args.rate:g} take {args.runs / args.rate:g} s "
                     f"to launch, not less than --timeout {args.timeout:g}: raise --timeout")
    result = asyncio.run(benchmark(args.runs, args.concurrency, args.timeout, args.rate,
                                   args.settle_seconds))
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
