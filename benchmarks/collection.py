"""A collection on Slurm: one ``start-array`` vs one chain per child (ADR 0032).

Both sides start the same ``--children`` prepared Attempts (default 100) on the
lab's slurmrestd, with the same member token, in the same run:

* arrays: the slurm executor's own ``start-array`` command — payload checks, the
  member token verified, the partition's capacity read, each child's two staging
  grants issued and every task's material file written, three arrays POSTed held;
* chains: what the Runtime does for the same children one by one — each child's
  three stages through the single-chain held submission (intent saved, POST, job id
  saved; stage-out and compute ``afterok`` on the stage before), its staging grants
  issued as each staging stage is posted.

Measured until *every child's three stages are in slurmctld, held* (PENDING,
``JobHeldUser``): no job ever runs, and both sides stop before their releases (the
arrays would add 3 release requests; the chains 3 per child plus a requeue check
each), so the request ratio printed is conservative for arrays. Requests are every
HTTP request the executor sends to slurmrestd (an httpx event hook); the Site
stream is ordered, so the chains side is sequential as the Runtime is. Afterwards
Slurm is asked (``squeue``) how many native jobs each side made, and everything is
cancelled.

Prints one JSON line with both sides' raw numbers and the ratios. Targets: arrays
use at most 1/20 of the chains' requests and are done at least 3x sooner. Needs
``scripts/slurm-lab up``; run as root under the Slurm lock:

    flock /tmp/metallo-slurm.lock .venv/bin/python benchmarks/collection.py
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
from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm.executor import SlurmExecutor
from site_runtime.adaptors.slurm.factory import build_slurm_executor
from site_runtime.adaptors.slurm.settings import SlurmSettings
from site_runtime.application.site_access import RepositoryGrant
from site_runtime.domain.slurm_stages import STAGES

HELD = "held:stage-out"


class _Grants:
    """Repository grants from memory (the Site edge is not what is measured)."""

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        return RepositoryGrant(f"g-{uuid.uuid4().hex[:12]}", "bench", uuid.uuid4().hex, "", "")

    async def release(self, grant_id: str) -> None:
        return None


class _AllHeld(Exception):
    """Stops ``start-array`` once its three arrays are held (before any release)."""


def _stop(step: str) -> None:
    if step == HELD:
        raise _AllHeld()


async def _executor(
    token: str, prefix: str, state: Path, children: int, fault=lambda step: None
) -> SlurmExecutor:
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
    executor = build_slurm_executor(
        settings, tokens=_FixedToken(token), grants=_Grants(), fault=fault
    )
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
    executor = await _executor(token, prefix, state, children, fault=_stop)
    tasks = [
        {"index": i, "run_id": "bench", "attempt_id": f"a{i}", "attempt_number": 1}
        for i in range(children)
    ]
    payload = {"array": {"group_id": str(uuid.uuid4()), "max_active": 0, "tasks": tasks}}
    command = bench_command("start-array", 0, children, payload)
    try:
        start = time.perf_counter()
        try:
            await executor.start_array(command)
            raise RuntimeError("start-array did not reach its held arrays")
        except _AllHeld:
            seconds = time.perf_counter() - start
        return {"seconds": seconds, "requests": executor.requests}  # type: ignore[attr-defined]
    finally:
        await executor.close()


async def chains_side(token: str, prefix: str, state: Path, children: int) -> dict:
    executor = await _executor(token, prefix, state, children)
    credential = MemberCredential(token)
    try:
        start = time.perf_counter()
        for i in range(children):
            att = executor.journal.attempt(f"a{i}")
            assert att is not None
            after = None
            for stage in STAGES:
                after = (await executor.submissions.post(att, stage, after, credential)).job_id
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "requests": executor.requests}  # type: ignore[attr-defined]
    finally:
        await executor.close()


def held_records(prefix: str) -> tuple[int, int]:
    """(native job records, of which held) slurmctld holds under ``prefix`` (an
    unsplit pending array is one record)."""
    out = subprocess.run(
        ["squeue", "-h", "-u", "alice", "-o", "%j|%r"], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split("|") for line in out.splitlines() if line.startswith(prefix)]
    return len(rows), sum(1 for r in rows if len(r) == 2 and r[1] == "JobHeldUser")


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
                records, held = held_records(prefix)
                sides[name].update(native_records=records, held_records=held)
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
                "measured_until": "every child's three stages held in slurmctld (PENDING)",
                "arrays_requests": arrays["requests"],
                "arrays_seconds": round(arrays["seconds"], 4),
                "arrays_native_records": arrays["native_records"],
                "chains_requests": chains["requests"],
                "chains_seconds": round(chains["seconds"], 4),
                "chains_native_records": chains["native_records"],
                "request_ratio": round(request_ratio, 4),
                "speedup": round(speedup, 2),
                "target_request_ratio": 0.05,
                "target_speedup": 3.0,
                "targets_met": request_ratio <= 0.05 and speedup >= 3.0,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
