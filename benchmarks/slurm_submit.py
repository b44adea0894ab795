"""Native Slurm submissions per second: raw slurmrestd vs the Runtime's slurm adaptor.

Both sides submit the same *held* compute jobs (they never run; every one is
cancelled afterwards) with the same member token and ``--concurrency`` requests
in flight, on the lab's slurmrestd, in alternating rounds:

* raw: the exact job requests the executor renders, POSTed with httpx;
* adaptor: the slurm executor's own submission step per job — the request
  rendered from the saved Attempt, the intent saved in ``jobs.sqlite`` before
  the POST, the member JWT verified (signature and claims), the POST, the job
  id saved (``held``).

Preparation (and rendering for the raw side) happens before the clock starts, and
each side submits one job first, outside the clock, so both are warm (a connection
open; for the adaptor its client, the JWKS and the member token's verification set
up), as a long-running Site Runtime is.
Prints one JSON line: ``{"raw_per_second", "adaptor_per_second", "ratio", ...}``
(``ratio`` from the totals) with each paired round's ratio and their median: on a
shared machine the raw rate alone moves by tens of percent minutes apart, and a
pair of back-to-back rounds meets the same load.
Target: ratio >= 0.85. Needs ``scripts/slurm-lab up``; run as root:

    .venv/bin/python benchmarks/slurm_submit.py --jobs 300 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from metallo.identity.issuer import DEFAULT_AZP, DEFAULT_ISSUER, LabIssuer
from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm.executor import SlurmExecutor
from site_runtime.adaptors.slurm.factory import build_slurm_executor
from site_runtime.adaptors.slurm.journal import AttemptRow
from site_runtime.adaptors.slurm.settings import SlurmSettings
from site_runtime.application.ports import SiteCommand
from site_runtime.domain.slurm_jobs import wire_job

LAB = Path("/var/lib/metallo-slurm-lab")
REST = "http://127.0.0.1:6820"


class _FixedToken:
    """The member-token port, answering with one lab token."""

    def __init__(self, token: str) -> None:
        self.credential = MemberCredential(token)

    async def member_token(self, attempt_id: str) -> MemberCredential:
        return self.credential


class _NoGrants:
    """Compute jobs need no repository grant."""

    async def issue(self, attempt_id: str, direction: str):
        raise RuntimeError("no grant is needed for compute")

    async def release(self, grant_id: str) -> None:
        return None


def bench_command(kind: str, i: int, sequence: int, payload: dict) -> SiteCommand:
    """Command ``kind`` of benchmark Attempt ``a<i>`` (Site ``lab-slurm``)."""
    return SiteCommand(
        sequence=sequence,
        command_id=f"{kind}-{sequence}-{i}",
        kind=kind,
        site_id="lab-slurm",
        environment="slurm",
        run_id="bench",
        attempt_id=f"a{i}",
        attempt_number=1,
        payload=payload,
    )


async def prepared(
    token: str, prefix: str, count: int, state: Path
) -> tuple[SlurmExecutor, list[AttemptRow]]:
    """An executor with ``count`` prepared Attempts whose jobs are named ``<prefix>-a<i>``."""
    settings = SlurmSettings.from_env(
        {
            "SLURM_REST_URL": REST,
            "SLURM_REST_ALLOW_INSECURE_LOOPBACK": "true",
            "SLURM_JWT_ISSUER": DEFAULT_ISSUER,
            "SLURM_JWT_AUTHORIZED_PARTY": DEFAULT_AZP,
            "SLURM_JWKS_URL": f"file:{LAB / 'issuer' / 'jwks.json'}",
            "RUNTIME_STATE_DIRECTORY": str(state),
            "SLURM_NATIVE_NAME_PREFIX": prefix,
        }
    )
    executor = build_slurm_executor(settings, tokens=_FixedToken(token), grants=_NoGrants())
    attempts = []
    for i in range(count):
        payload = {
            "family": "queued-batch",
            "material_digest": "sha256:bench",
            "spec": {
                "command": {"argv": ["true"]},
                "resources": {"cpus": 1, "memoryMiB": 64, "wallTimeSeconds": 60},
            },
            "repository": {"url": "file:///none.git", "commit": "0" * 40, "branch": "main"},
            "member": {"id": "m-alice", "site_username": "alice", "account": "demo"},
        }
        command = bench_command("prepare", i, i, payload)
        result = await executor.prepare(command)
        if result.outcome != "succeeded":
            raise RuntimeError(f"preparation refused: {result.code}")
        attempts.append(executor.journal.attempt(f"a{i}"))
    return executor, attempts


async def bounded(count: int, concurrency: int, one) -> float:
    """Run ``one(i)`` for i < count with ``concurrency`` in flight; return elapsed seconds."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await one(i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start


async def raw_side(token: str, prefix: str, count: int, concurrency: int, state: Path) -> float:
    executor, attempts = await prepared(token, prefix, count + 1, state)
    bodies = []
    for att in attempts:
        request = executor.submissions.render(att, "compute", None)
        bodies.append(json.dumps({"script": request["script"], "job": wire_job(request["job"])}))
    await executor.rest.close()
    executor.journal.close()
    headers = {
        "X-SLURM-USER-NAME": "alice",
        "X-SLURM-USER-TOKEN": token,
        "Content-Type": "application/json",
    }
    async with httpx.AsyncClient(
        base_url=REST, timeout=30, trust_env=False, limits=httpx.Limits(max_connections=16)
    ) as client:

        async def one(i: int) -> None:
            response = await client.post(
                "/slurm/v0.0.38/job/submit", content=bodies[i + 1], headers=headers
            )
            if response.status_code != 200 or "job_id" not in response.json():
                raise RuntimeError(f"raw submission failed: HTTP {response.status_code}")

        await one(-1)  # warm: the client's first connection, outside the clock
        return await bounded(count, concurrency, one)


async def adaptor_side(token: str, prefix: str, count: int, concurrency: int, state: Path) -> float:
    executor, attempts = await prepared(token, prefix, count + 1, state)
    credential = MemberCredential(token)

    async def one(i: int) -> None:
        await executor.submissions.post(attempts[i + 1], "compute", None, credential)

    try:
        # Warm, as a running Runtime is: its HTTP client, the JWKS and the token's
        # verification are set up by its first submission, outside the clock (that
        # one costs 50-250 ms here, a large share of a short round).
        await one(-1)
        return await bounded(count, concurrency, one)
    finally:
        await executor.rest.close()
        executor.journal.close()


def cancel(prefix: str) -> None:
    """Cancel every pending job whose name starts with ``prefix``; wait until none is left."""
    for _ in range(100):
        out = subprocess.run(
            ["squeue", "-h", "-u", "alice", "-t", "PENDING", "-o", "%i %j"],
            check=False,
            capture_output=True,
            text=True,
        ).stdout
        fields = (line.split() for line in out.splitlines())
        ids = [f[0] for f in fields if len(f) == 2 and f[1].startswith(prefix)]
        if not ids:
            return
        subprocess.run(["scancel", *ids], check=False, capture_output=True)
        time.sleep(0.2)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300, help="submissions per side (4..2000)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight (1..32)")
    parser.add_argument("--rounds", type=int, default=8, help="paired rounds (2..40)")
    args = parser.parse_args()
    concurrency = max(1, min(args.concurrency, 32))
    issuer = LabIssuer(LAB / "issuer" / "private.pem", issuer=DEFAULT_ISSUER, azp=DEFAULT_AZP)
    token, _ = issuer.issue("m-alice", "alice", 600)
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    rounds = max(2, min(args.rounds, 40))
    per_round = max(1, min(args.jobs, 2000) // rounds)
    raw = adaptor = 0.0
    paired: list[float] = []  # each round's adaptor rate over its raw rate
    try:
        with tempfile.TemporaryDirectory() as state:
            base = Path(state)
            await raw_side(token, f"{prefix}-w", 10, concurrency, base / "w1")
            await adaptor_side(token, f"{prefix}-w", 10, concurrency, base / "w2")
            cancel(prefix)
            # Interleaved rounds in alternating order, the queue emptied before each,
            # so neither side meets a longer job table or a quieter machine by design.
            for r in range(rounds):
                order = ("raw", "adaptor") if r % 2 == 0 else ("adaptor", "raw")
                took: dict[str, float] = {}
                for side in order:
                    where = base / f"{side}{r}"
                    if side == "raw":
                        took[side] = await raw_side(
                            token, f"{prefix}-r{r}", per_round, concurrency, where
                        )
                    else:
                        took[side] = await adaptor_side(
                            token, f"{prefix}-p{r}", per_round, concurrency, where
                        )
                    cancel(prefix)
                raw += took["raw"]
                adaptor += took["adaptor"]
                paired.append(took["raw"] / took["adaptor"])
    finally:
        cancel(prefix)
    count = rounds * per_round
    raw_rate, adaptor_rate = count / raw, count / adaptor
    print(
        json.dumps(
            {
                "benchmark": "slurm_submit",
                "jobs": count,
                "concurrency": concurrency,
                "raw_per_second": round(raw_rate, 1),
                "adaptor_per_second": round(adaptor_rate, 1),
                "ratio": round(adaptor_rate / raw_rate, 3),
                "rounds": rounds,
                "median_round_ratio": round(statistics.median(paired), 3),
                "round_ratios": [round(x, 3) for x in paired],
                "target_ratio": 0.85,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
