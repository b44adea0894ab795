"""A collection on Slurm: one ``start-array`` vs one chain per child (ADR 0032).

Both sides start the same ``--children`` prepared Attempts (default 100) on the
lab's slurmrestd, with the same member token, in the same run, each through the
slurm executor's own command:

* arrays: ONE ``start-array`` — payload checks, the member token verified, the
  partition's capacity read, each child's two staging grants issued and every
  task's material file written, three arrays POSTed held, then released;
* chains: one ``start`` per child, in order as the Site stream is — authorisation,
  the partition's capacity read, the stage-in job POSTed held and released.

Each side is measured until *every child is running*: Slurm has started every
child's first native job (its stage-in task or job has left PENDING; ``squeue
-r``, polled every 0.1 s), and the time its start command(s) took is printed
beside it. The stage-in jobs end at once (their grants are fake), so no compute
job ever runs; on the lab's eight CPUs the children start eight or so at a
time, as Slurm schedules them (ADR 0038). The chains side is conservative for
arrays: a chain's compute and stage-out jobs are submitted later, one by one as
its stages complete (two more submissions per child that the arrays side has
already made).
Requests are every HTTP request the executor sends to slurmrestd (an httpx
event hook). Afterwards Slurm is asked how many native jobs each side made, and
everything is cancelled.

Prints one JSON line with both sides' raw numbers and the ratios. Targets: arrays
use at most 1/20 of the chains' requests and reach all-running at least 3x
sooner. Needs ``scripts/slurm-lab up``; run as root under the Slurm lock:

    flock /tmp/metallo-slurm.lock .venv/bin/python -m benchmarks.collection
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from benchmarks.slurm_submit import LAB, REST, _FixedToken, bench_command
from metallo.identity.issuer import DEFAULT_AZP, DEFAULT_ISSUER, LabIssuer
from site_runtime.adaptors.slurm.executor import SlurmExecutor
from site_runtime.adaptors.slurm.factory import build_slurm_executor
from site_runtime.adaptors.slurm.settings import SlurmSettings
from site_runtime.application.site_access import RepositoryGrant

POLL_SECONDS = 0.1


class _Grants:
    """Repository grants from memory (the Site edge is not what is measured)."""

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        return RepositoryGrant(f"g-{uuid.uuid4().hex[:12]}", "bench", uuid.uuid4().hex, "", "")

    async def release(self, grant_id: str) -> None:
        return None


async def _executor(token: str, prefix: str, state: Path, children: int) -> SlurmExecutor:
    """An executor with ``children`` prepared Attempts ``a0..``, counting its requests."""
    settings = SlurmSettings.from_env(
        {
            "SLURM_REST_URL": REST,
            "SLURM_REST_ALLOW_INSECURE_LOOPBACK": "true",
            "SLURM_JWT_ISSUER": DEFAULT_ISSUER,
            "SLURM_JWT_AUTHORIZED_PARTY": DEFAULT_AZP,
            "SLURM_JWKS_URL": f"file:{LAB / 'issuer' / 'jwks.json'}",
            "RUNTIME_STATE_DIRECTORY": str(state),
            "SLURM_WORKSPACE_ROOT": str(state / "workspaces"),
            "SLURM_NATIVE_NAME_PREFIX": prefix,
            "SLURM_STAGING_MEMORY_MIB": "64",
        }
    )
    (state / "workspaces").mkdir(parents=True, mode=0o711)
    executor = build_slurm_executor(settings, tokens=_FixedToken(token), grants=_Grants())
    for i in range(children):
        payload = {
            "family": "queued-batch",
            "material_digest": f"sha256:bench-{i}",
            "spec": {
                "command": {"argv": ["true"]},
                "parameters": {"item": str(i)},
                "resources": {"cpus": 1, "memoryMiB": 64, "wallTimeSeconds": 60},
            },
            "repository": {"url": "file:///none.git", "commit": "0" * 40, "branch": "main"},
            "member": {"id": "m-alice", "site_username": "alice", "account": "demo"},
        }
        result = await executor.prepare(bench_command("prepare", i, i, payload))
        if result.outcome != "succeeded":
            raise RuntimeError(f"preparation refused: {result.code}")
    rest = executor.rest
    executor.requests = 0  # type: ignore[attr-defined]

    async def count(request: httpx.Request) -> None:
        executor.requests += 1  # type: ignore[attr-defined]

    rest._client = httpx.AsyncClient(
        base_url=rest.base_url,
        timeout=rest.timeout_seconds,
        follow_redirects=False,
        trust_env=False,
        event_hooks={"request": [count]},
    )
    return executor


async def arrays_side(token: str, prefix: str, state: Path, children: int) -> dict:
    executor = await _executor(token, prefix, state, children)
    tasks = [
        {"index": i, "run_id": "bench", "attempt_id": f"a{i}", "attempt_number": 1}
        for i in range(children)
    ]
    payload = {"array": {"group_id": str(uuid.uuid4()), "max_active": 0, "tasks": tasks}}
    try:
        start = time.perf_counter()
        result = await executor.start_array(bench_command("start-array", 0, children, payload))
        if result.outcome != "succeeded":
            raise RuntimeError(f"start-array refused: {result.code}: {result.message}")
        return await _until_running(executor, prefix, children, start)
    finally:
        await executor.close()


async def chains_side(token: str, prefix: str, state: Path, children: int) -> dict:
    executor = await _executor(token, prefix, state, children)
    try:
        start = time.perf_counter()
        for i in range(children):
            result = await executor.start(bench_command("start", i, children + i, {}))
            if result.outcome != "succeeded":
                raise RuntimeError(f"start refused: {result.code}: {result.message}")
        return await _until_running(executor, prefix, children, start)
    finally:
        await executor.close()


async def _until_running(executor: SlurmExecutor, prefix: str, children: int, start: float,
                         timeout: float = 300.0) -> dict:
    """Seconds from ``start`` until every stage-in of ``prefix`` has left PENDING, the
    requests sent by then, and the native jobs seen on the way (an array counts
    once). Every stage-in exists (released) when the start command returns and is
    listed once per task (``squeue -r``) until MinJobAge (10 s) after it ended, far
    longer than a poll; a started one is never PENDING again (nothing requeues it)."""
    submitted = time.perf_counter() - start
    requests = executor.requests  # type: ignore[attr-defined]
    jobs: set[str] = set()
    stage_ins: set[str] = set()
    while True:
        records = listed(prefix)
        jobs.update(job for _, _, job, _ in records)
        pending = 0
        for name, state, _, task in records:
            if name.endswith("-in"):
                stage_ins.add(task)
                pending += state == "PENDING"
        if len(stage_ins) >= children and not pending:
            break
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"after {timeout} s {len(stage_ins)} of {children} stage-in jobs "
                               f"were seen, {pending} of them still pending")
        await asyncio.sleep(POLL_SECONDS)
    return {"seconds": time.perf_counter() - start, "submitted_seconds": submitted,
            "requests": requests, "native_jobs": len(jobs)}


def listed(prefix: str) -> list[tuple[str, str, str, str]]:
    """(name, state, array job id or job id, task or job id) of every task or job
    under ``prefix`` slurmctld lists, one line per array task (``squeue -r``)."""
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-u", "alice", "-o", "%j|%T|%F|%i"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.rsplit("|", 3) for line in out.splitlines()]
    return [(r[0], r[1], r[2], r[3]) for r in rows if len(r) == 4 and r[0].startswith(prefix)]


def cancel(prefix: str) -> None:
    """Cancel every job whose name starts with ``prefix``; wait until none is left."""
    for _ in range(100):
        out = subprocess.run(
            ["squeue", "-h", "-u", "alice", "-o", "%A %j"],
            check=False,
            capture_output=True,
            text=True,
        ).stdout
        ids = [f[0] for f in (line.split() for line in out.splitlines()) if f[1:2] and
               f[1].startswith(prefix)]
        if not ids:
            return
        subprocess.run(["scancel", *sorted(set(ids))], check=False, capture_output=True)
        time.sleep(0.2)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=100, help="children per side (2..1000)")
    parser.add_argument("--smoke", action="store_true", help="4 children (the test suite's size)")
    args = parser.parse_args()
    children = 4 if args.smoke else max(2, min(args.children, 1000))
    issuer = LabIssuer(LAB / "issuer" / "private.pem", issuer=DEFAULT_ISSUER, azp=DEFAULT_AZP)
    token, _ = issuer.issue("m-alice", "alice", 600)
    run = uuid.uuid4().hex[:8]
    sides: dict[str, dict] = {}
    try:
        with tempfile.TemporaryDirectory() as state:
            base = Path(state)
            # Arrays first, then chains: each side's jobs are counted, then cancelled,
            # so neither meets the other's records in slurmctld's job table.
            for name, side in (("arrays", arrays_side), ("chains", chains_side)):
                prefix = f"bench-{run}{name[0]}"
                sides[name] = await side(token, prefix, base / name, children)
                cancel(prefix)
    finally:
        for name in ("a", "c"):
            cancel(f"bench-{run}{name}")
    arrays, chains = sides["arrays"], sides["chains"]
    request_ratio = arrays["requests"] / chains["requests"]
    speedup = chains["seconds"] / arrays["seconds"]
    print(
        json.dumps(
            {
                "benchmark": "collection",
                "children": children,
                "measured_until": "every child running: each child's stage-in started by Slurm",
                "arrays_requests": arrays["requests"],
                "arrays_submitted_seconds": round(arrays["submitted_seconds"], 4),
                "arrays_seconds": round(arrays["seconds"], 4),
                "arrays_native_jobs": arrays["native_jobs"],
                "chains_requests": chains["requests"],
                "chains_submitted_seconds": round(chains["submitted_seconds"], 4),
                "chains_seconds": round(chains["seconds"], 4),
                "chains_native_jobs": chains["native_jobs"],
                "request_ratio": round(request_ratio, 4),
                "speedup": round(speedup, 2),
                "submitted_speedup": round(chains["submitted_seconds"] / arrays["submitted_seconds"], 2),
                "target_request_ratio": 0.05,
                "target_speedup": 3.0,
                "targets_met": request_ratio <= 0.05 and speedup >= 3.0,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
