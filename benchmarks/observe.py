"""Observation cost per cycle: 1,000 vs 100 active Attempts on the Slurm lab.

Each Attempt's compute job is submitted *held* by the executor's own submission
step (it never runs; every job is cancelled afterwards) and its stage marked
submitted, so each ``observe`` reads and reconciles a live PENDING job. One cycle is
one ``observe`` of every active Attempt (all in flight at once, as the worker's
observe timer sends them). Measured per cycle, for the large and the small set in
the same run: slurmrestd HTTP requests (counted on the adaptor's own client) and
the Runtime's CPU seconds (``time.process_time``).

Target (docs/site-runtime.md, Reconciliation): requests per cycle do not grow with
the number of Attempts (≤ 2 + accounting look-ups of jobs that left the queue), CPU
per cycle grows at most linearly. Prints one JSON line. Needs ``scripts/slurm-lab up``;
run as root, under ``flock /tmp/metallo-slurm.lock``:

    .venv/bin/python -m benchmarks.observe --large 1000 --small 100
    .venv/bin/python -m benchmarks.observe --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.slurm_submit import bench_command, cancel, prepared
from metallo.identity.issuer import DEFAULT_AZP, DEFAULT_ISSUER, LabIssuer
from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm.executor import SlurmExecutor

LAB = Path("/var/lib/metallo-slurm-lab")


class _Counter:
    def __init__(self) -> None:
        self.requests = 0

    async def __call__(self, request) -> None:
        self.requests += 1


async def active(token: str, prefix: str, count: int, state: Path) -> SlurmExecutor:
    """An executor with ``count`` Attempts whose compute job is held in slurmctld
    (stage-in recorded as completed: staging jobs would need repository grants)."""
    executor, attempts = await prepared(token, prefix, count, state)
    credential = MemberCredential(token)
    queue = list(attempts)

    async def worker() -> None:
        while queue:
            att = queue.pop()
            await executor.submissions.post(att, "compute", None, credential)
            executor.journal.update_stage(att.attempt_id, "compute", state="submitted")
            executor.journal.update_stage(
                att.attempt_id,
                "stage-in",
                state="submitted",
                job_id="1",
                native={"state": "COMPLETED", "terminal": True, "exit_code": 0},
            )

    await asyncio.gather(*(worker() for _ in range(8)))
    return executor


async def cycles(executor: SlurmExecutor, count: int, rounds: int) -> dict[str, float]:
    """Mean requests and CPU seconds of one observe cycle over ``rounds`` cycles."""
    counter = _Counter()
    executor.rest._http().event_hooks["request"].append(counter)
    executor.rest.list_cache_seconds = 5.0  # one cycle shares one list, as in the worker
    requests = cpu = 0.0
    for r in range(rounds):
        executor.rest.forget_list()
        before_requests, before_cpu = counter.requests, time.process_time()
        results = await asyncio.gather(
            *(executor.observe(bench_command("observe", i, r, {})) for i in range(count))
        )
        cpu += time.process_time() - before_cpu
        requests += counter.requests - before_requests
        phases = {res.observation["phase"] for res in results}
        if phases != {"queued"}:
            raise RuntimeError(f"unexpected phases {phases}")
    return {"requests": requests / rounds, "cpu_seconds": cpu / rounds}


async def measure(token: str, prefix: str, count: int, rounds: int, state: Path) -> dict:
    executor = await active(token, prefix, count, state)
    try:
        return await cycles(executor, count, rounds)
    finally:
        await executor.rest.close()
        executor.journal.close()
        cancel(prefix)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=1000, help="active Attempts (10..5000)")
    parser.add_argument("--small", type=int, default=100, help="active Attempts (1..1000)")
    parser.add_argument("--rounds", type=int, default=3, help="cycles measured per set")
    parser.add_argument("--smoke", action="store_true", help="6 vs 2 Attempts, one cycle")
    args = parser.parse_args()
    large, small, rounds = (6, 2, 1) if args.smoke else (args.large, args.small, args.rounds)
    large, small = max(2, min(large, 5000)), max(1, min(small, 1000))
    issuer = LabIssuer(LAB / "issuer" / "private.pem", issuer=DEFAULT_ISSUER, azp=DEFAULT_AZP)
    token, _ = issuer.issue("m-alice", "alice", 1800)
    prefix = f"bobs-{uuid.uuid4().hex[:8]}"
    try:
        with tempfile.TemporaryDirectory() as state:
            few = await measure(token, f"{prefix}-s", small, rounds, Path(state) / "s")
            many = await measure(token, f"{prefix}-l", large, rounds, Path(state) / "l")
    finally:
        cancel(prefix)
    print(
        json.dumps(
            {
                "benchmark": "observe",
                "small_attempts": small,
                "large_attempts": large,
                "small_requests_per_cycle": few["requests"],
                "large_requests_per_cycle": many["requests"],
                "small_cpu_seconds_per_cycle": round(few["cpu_seconds"], 4),
                "large_cpu_seconds_per_cycle": round(many["cpu_seconds"], 4),
                "cpu_growth": round(many["cpu_seconds"] / max(few["cpu_seconds"], 1e-9), 2),
                "attempt_growth": round(large / small, 2),
                "target_requests_per_cycle": 2,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
