"""Kubernetes Jobs created per second: raw lightkube creates vs the kubernetes executor.

Both sides create the same compute Jobs of prepared Attempts on the Kubernetes lab,
impersonating the same member, with ``--concurrency`` creates in flight, in
alternating rounds:

* raw: the exact Job manifests the executor renders (rendered before the clock
  starts), created with lightkube's ``AsyncClient.create`` through an impersonating
  transport;
* executor: the executor's own create step per Attempt — the Job rendered from the
  saved Attempt, the intent saved in ``jobs.sqlite`` before the request, the
  impersonated create, the uid saved.

Every Job is created suspended (``spec.suspend: true``) on both sides, so a cluster
starts no Pods. The lab does not emulate ``suspend``: its Pods wait unschedulable
(the Attempts' workspace claims do not exist) until the run deletes every Job and
Pod it made (foreground) at the end. Prints
one JSON line ``{"benchmark", "jobs", "concurrency", "raw_per_second",
"executor_per_second", "ratio", "target_ratio"}``. Target: ratio >= 0.8. Needs
``scripts/k8s-lab up``; ``--smoke`` makes a short run (the test suite's):

    .venv/bin/python benchmarks/k8s_submit.py --jobs 300 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path

import httpx2
from lightkube import AsyncClient, codecs
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.generic_client import ALL_NS
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType

from site_runtime.adaptors.kubernetes import api as kube_api
from site_runtime.adaptors.kubernetes import stages
from site_runtime.adaptors.kubernetes.api import KubeApi
from site_runtime.adaptors.kubernetes.executor import KubernetesExecutor
from site_runtime.adaptors.kubernetes.journal import KubernetesJournal
from site_runtime.adaptors.kubernetes.settings import settings_from_env
from site_runtime.domain.kubernetes_manifests import compute_job
from site_runtime.domain.kubernetes_names import LABEL_SITE

LAB = Path("/var/lib/metallo-k8s-lab")
MEMBER = {"id": "m-alice", "site_username": "alice", "account": "demo"}


def suspended(render):
    """``render`` whose Jobs are created suspended (no Pods start)."""

    def wrapped(*args, **kwargs):
        manifest = render(*args, **kwargs)
        manifest["spec"]["suspend"] = True
        return manifest

    return wrapped


def executor_for(state: Path, site_id: str) -> KubernetesExecutor:
    env = {
        "KUBERNETES_KUBECONFIG": str(LAB / "kubeconfig"),
        "KUBERNETES_SITE_ID": site_id,
        "KUBERNETES_RUN_AS": "passwd",
    }
    settings = settings_from_env(env, state)

    class _Edge:
        async def authorise_execution(self, request):
            return {}

        async def issue(self, attempt_id, direction):
            raise RuntimeError("no grant is needed for compute")

        async def release(self, grant_id):
            return None

    return KubernetesExecutor(
        settings,
        KubernetesJournal(state / "jobs.sqlite"),
        KubeApi(settings.kubeconfig),
        _Edge(),
        _Edge(),
    )


def prepared(executor: KubernetesExecutor, count: int, tag: str) -> list:
    """``count`` Attempts saved as started (their Jobs not yet created)."""
    rows = []
    for i in range(count):
        payload = {
            "project": "demo",
            "family": "queued-batch",
            "material_digest": f"sha256:{tag}{i}",
            "spec": {
                "command": {"argv": ["true"]},
                "resources": {"cpus": 1, "memoryMiB": 64, "wallTimeSeconds": 60},
            },
            "repository": {"url": "file:///none.git", "commit": "0" * 40, "branch": "main"},
            "member": dict(MEMBER),
        }
        row = executor.journal.insert_attempt(f"{tag}-a{i}", f"{tag}-r", 1, payload, "metallo-demo")
        executor.journal.set_state(row.attempt_id, "compute")
        rows.append(executor.journal.attempt(row.attempt_id))
    return rows


async def bounded(count: int, concurrency: int, one) -> float:
    """Run ``one(i)`` for i < count with ``concurrency`` in flight; elapsed seconds."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            await one(queue.get_nowait())

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start


async def raw_side(state: Path, site_id: str, count: int, concurrency: int, tag: str) -> float:
    executor = executor_for(state, site_id)
    rows = prepared(executor, count, tag)
    site = executor.site
    manifests = []
    for row in rows:
        job = executor.stages.job(row)
        manifest = compute_job(site, job, stages.identity_of(row, site.site_id))
        manifest["spec"]["suspend"] = True
        manifests.append(codecs.from_dict(manifest))
    await executor.close()
    config = KubeConfig.from_file(LAB / "kubeconfig").get()
    verify = verify_cluster(config.cluster, config.user, config.abs_file, trust_env=False)
    transport = kube_api._Impersonating(
        httpx2.AsyncHTTPTransport(verify=verify), "alice", ("metallo:members",)
    )
    client = AsyncClient(config, trust_env=False, transport=transport)

    async def one(i: int) -> None:
        await client.create(manifests[i])

    try:
        return await bounded(count, concurrency, one)
    finally:
        await client.close()


async def executor_side(state: Path, site_id: str, count: int, concurrency: int, tag: str) -> float:
    executor = executor_for(state, site_id)
    rows = prepared(executor, count, tag)

    async def one(i: int) -> None:
        await executor.stages.begin_compute(rows[i])

    try:
        return await bounded(count, concurrency, one)
    finally:
        await executor.close()


async def sweep(site_id: str) -> None:
    """Delete every Job of this run and its Pods (by the run's Site label)."""
    client = AsyncClient(KubeConfig.from_file(LAB / "admin.kubeconfig"), trust_env=False)
    try:
        for kind in (Job, Pod):
            async for obj in client.list(kind, namespace=ALL_NS, labels={LABEL_SITE: site_id}):
                await client.delete(
                    kind,
                    obj.metadata.name,
                    namespace=obj.metadata.namespace,
                    cascade=CascadeType.FOREGROUND,
                    grace_period=0,
                )
    finally:
        await client.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300, help="creates per side (8..2000)")
    parser.add_argument("--concurrency", type=int, default=8, help="creates in flight (1..32)")
    parser.add_argument("--smoke", action="store_true", help="a short run (16 Jobs per side)")
    args = parser.parse_args()
    jobs = 16 if args.smoke else max(8, min(args.jobs, 2000))
    concurrency = max(1, min(args.concurrency, 32))
    site_id = f"bench-{uuid.uuid4().hex[:8]}"
    stages.compute_job = suspended(stages.compute_job)  # the executor's Jobs too
    rounds = 2 if args.smoke else 4
    per_round = max(1, jobs // rounds)
    raw = executor = 0.0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            await raw_side(base / "w1", site_id, 4, concurrency, "w1")  # warm both paths
            await executor_side(base / "w2", site_id, 4, concurrency, "w2")
            for r in range(rounds):
                for side in ("raw", "executor") if r % 2 == 0 else ("executor", "raw"):
                    where, tag = base / f"{side}{r}", f"{side[0]}{r}-{uuid.uuid4().hex[:6]}"
                    if side == "raw":
                        raw += await raw_side(where, site_id, per_round, concurrency, tag)
                    else:
                        executor += await executor_side(where, site_id, per_round, concurrency, tag)
    finally:
        await sweep(site_id)
    count = rounds * per_round
    raw_rate, executor_rate = count / raw, count / executor
    print(
        json.dumps(
            {
                "benchmark": "k8s_submit",
                "jobs": count,
                "concurrency": concurrency,
                "raw_per_second": round(raw_rate, 1),
                "executor_per_second": round(executor_rate, 1),
                "ratio": round(executor_rate / raw_rate, 3),
                "target_ratio": 0.8,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
