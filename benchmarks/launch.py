"""Benchmark: N trivial Runs launched through the client contract until completed
(issue 8, item 6).

Needs the dev stack with the local executor (``metallo dev up --executor local``).
It publishes a repository whose one action runs ``true``, prepares it once
(PrepareAction), then sends ``--runs`` LaunchRun commands (``--concurrency`` in
flight) through :class:`RequestClient` exactly as the Go API and the CLI do, and
polls GetRun until every Run has ended. Beside it, in the same run and on the same
broker, it measures the raw request/reply round trip (a message to an exclusive
queue and back, no service) and a GetRun query's round trip.

Prints one JSON line::

  {"runs", "succeeded", "failed", "wall_seconds", "runs_per_second",
   "launch_to_native_start_p50_s", "launch_to_native_start_p95_s",
   "launch_reply_p50_ms", "query_round_trip_p50_ms", "broker_round_trip_p50_ms",
   "target": {...}, "meets_target": bool}

Launch → native start is from sending LaunchRun to the Run's ``started_at``
(the Site accepted the native start; same machine, same clock).
Usage: .venv/bin/python -m benchmarks.launch [--runs 100] [--concurrency 16]
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

import aio_pika

from metallo.cli.settings import Actor
from metallo.cli.transport import command_metadata, query_metadata
from metallo.devstack.control import status
from metallo.devstack.gitrepo import publish
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import RequestClient, Topology
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp

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


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def broker_round_trips(amqp_url: str, count: int) -> list[float]:
    """Seconds for ``count`` publish → consume round trips through an exclusive queue."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        arrived: asyncio.Queue = asyncio.Queue()
        await queue.consume(lambda m: arrived.put_nowait(m), no_ack=True)
        times = []
        for _ in range(count):
            start = time.perf_counter()
            await channel.default_exchange.publish(aio_pika.Message(b"x"), routing_key=queue.name)
            await arrived.get()
            times.append(time.perf_counter() - start)
        return times


async def benchmark(runs: int, concurrency: int, timeout: float) -> dict:
    state = status()
    if state is None or state.get("executor") != "local":
        raise SystemExit("benchmarks/launch.py needs the dev stack with the local executor: "
                         "metallo dev up --executor local")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "actions.yaml").write_text(ACTIONS)
        url, _commit = publish(Path(tmp), f"bench-{uuid.uuid4().hex[:8]}",
                               edge_url=state["edge_url"])
    topology = Topology(prefix=state.get("topology_prefix", ""))
    client = RequestClient(state["amqp_url"], topology)
    await client.start()
    try:
        prepared = await client.request(wp.PrepareAction(
            metadata=command_metadata(WHO), repository_url=url, branch="main", action="noop"),
            timeout=60)
        limit = asyncio.Semaphore(concurrency)
        launched: dict[str, float] = {}
        reply_times: list[float] = []

        async def launch() -> None:
            async with limit:
                sent_wall, sent = time.time(), time.perf_counter()
                reply = await client.request(ec.LaunchRun(
                    metadata=command_metadata(WHO), workload_id=prepared.workload_id,
                    revision=prepared.revision), timeout=60)
                reply_times.append(time.perf_counter() - sent)
                launched[reply.run_id] = sent_wall

        began = time.perf_counter()
        await asyncio.gather(*(launch() for _ in range(runs)))
        finished: dict[str, ec.Run] = {}
        query_times: list[float] = []
        deadline = time.perf_counter() + timeout
        while len(finished) < len(launched) and time.perf_counter() < deadline:
            async def poll(run_id: str) -> None:
                async with limit:
                    start = time.perf_counter()
                    run = await client.request(ec.GetRun(metadata=query_metadata(WHO),
                                                         run_id=run_id), timeout=30)
                    query_times.append(time.perf_counter() - start)
                    if run.phase == "terminal":
                        finished[run_id] = run
            await asyncio.gather(*(poll(r) for r in launched if r not in finished))
            await asyncio.sleep(0.2)
        wall = time.perf_counter() - began
        starts = [r.started_at.ToDatetime(tzinfo=UTC).timestamp() - launched[rid]
                  for rid, r in finished.items() if r.started_at.seconds]
    finally:
        await client.close()
    broker = await broker_round_trips(state["amqp_url"], 200)
    outcomes = [r.outcome for r in finished.values()]
    rate = len(finished) / wall if wall else 0.0
    p50 = percentile(starts, 0.5)
    return {
        "runs": runs, "completed": len(finished),
        "succeeded": outcomes.count("succeeded"), "failed": len(finished) - outcomes.count("succeeded"),
        "wall_seconds": round(wall, 3), "runs_per_second": round(rate, 3),
        "launch_to_native_start_p50_s": round(p50, 3) if p50 is not None else None,
        "launch_to_native_start_p95_s": (round(percentile(starts, 0.95), 3) if starts else None),
        "launch_reply_p50_ms": round(1000 * statistics.median(reply_times), 2),
        "query_round_trip_p50_ms": (round(1000 * statistics.median(query_times), 2)
                                    if query_times else None),
        "broker_round_trip_p50_ms": round(1000 * statistics.median(broker), 3),
        "concurrency": concurrency,
        "target": {"runs_per_second": TARGET_RUNS_PER_SECOND,
                   "launch_to_native_start_p50_s": TARGET_P50_SECONDS},
        "meets_target": bool(rate >= TARGET_RUNS_PER_SECOND and p50 is not None
                             and p50 <= TARGET_P50_SECONDS and len(finished) == runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the end")
    args = parser.parse_args()
    result = asyncio.run(benchmark(args.runs, args.concurrency, args.timeout))
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
