"""Kubernetes Jobs started per second: raw lightkube creates vs the executor's ``start``.

Both sides create the same compute Jobs of prepared Attempts on the Kubernetes lab,
impersonating the same member, with ``--concurrency`` in flight, in alternating
rounds:

* raw: the exact Job manifests the executor renders (rendered before the clock
  starts), created with lightkube's ``AsyncClient.create`` through an impersonating
  transport;
* executor: the whole ``start`` command, as the Runtime handles one — the journal's
  replay check and the Attempt's lock, authorisation (an in-memory authority: the
  Site edge's round trip is not the Kubernetes API's), the snapshot (one list of the
  Site's Jobs and one of its Pods, shared by the starts of one cycle), the ended
  preparation Pod judged, the intent saved in ``jobs.sqlite``, the impersonated
  create, the uid and the exact result saved.

Before each executor round's clock starts, every Attempt of the round is prepared as
the Runtime leaves it: a preparation Pod of its identity that has Succeeded (a
minimal Pod running ``true``, no workspace), journalled as created. Every Job is
created suspended (``spec.suspend: true``) on both sides, so a cluster starts no
Pods; the lab does not emulate ``suspend``, its Pods wait unschedulable (the
workspace claims do not exist). Each round's Jobs and Pods are deleted after its
clock stops (the namespace quota counts them). Prints one JSON line
``{"benchmark", "jobs", "concurrency", "raw_per_second", "executor_per_second",
"ratio", "target_ratio", "measures"}``. Target: ratio >= 0.8. Needs
``scripts/k8s-lab up`` (its files under ``METALLO_K8S_LAB_STATE``, as the tests'); ``--smoke`` makes a short run (the test suite's):

    .venv/bin/python -m benchmarks.k8s_submit --jobs 300 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import httpx2
from lightkube import AsyncClient, codecs
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.core.generic_client import ALL_NS
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType

from site_runtime.adaptors.kubernetes import api as kube_api
from site_runtime.adaptors.kubernetes import stages
from site_runtime.adaptors.kubernetes.api import KubeApi
from site_runtime.adaptors.kubernetes.executor import KubernetesExecutor
from site_runtime.adaptors.kubernetes.journal import AttemptRow, KubernetesJournal
from site_runtime.adaptors.kubernetes.settings import settings_from_env
from site_runtime.application.ports import SiteCommand
from site_runtime.domain.kubernetes_manifests import compute_job
from site_runtime.domain.kubernetes_names import LABEL_SITE, LABEL_STAGE, object_name

LAB = Path(os.environ.get("METALLO_K8S_LAB_STATE", "/var/lib/metallo-k8s-lab"))
MEMBER = {"id": "m-alice", "site_username": "alice", "account": "demo"}
NAMESPACE = "metallo-demo"


def suspended(render):
    """``render`` whose Jobs are created suspended (no Pods start)."""

    def wrapped(*args, **kwargs):
        manifest = render(*args, **kwargs)
        manifest["spec"]["suspend"] = True
        return manifest

    return wrapped


class _Edge:
    """The Site edge in memory: every execution authorised, no grants needed."""

    async def authorise_execution(self, request):
        return {"authorised": True}

    async def issue(self, attempt_id, direction):
        raise RuntimeError("no grant is needed for compute")

    async def release(self, grant_id):
        return None


def executor_for(state: Path, site_id: str) -> KubernetesExecutor:
    env = {
        "KUBERNETES_KUBECONFIG": str(LAB / "kubeconfig"),
        "KUBERNETES_SITE_ID": site_id,
        "KUBERNETES_RUN_AS": "passwd",
    }
    settings = settings_from_env(env, state)
    return KubernetesExecutor(
        settings,
        KubernetesJournal(state / "jobs.sqlite"),
        KubeApi(settings.kubeconfig),
        _Edge(),
        _Edge(),
    )


def prepared(executor: KubernetesExecutor, count: int, tag: str) -> list[AttemptRow]:
    """``count`` Attempts saved as prepared (no object of theirs exists yet)."""
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
        row = executor.journal.insert_attempt(f"{tag}-a{i}", f"{tag}-r", 1, payload, NAMESPACE)
        rows.append(row)
    return rows


def member_client() -> AsyncClient:
    """lightkube as the member (the Runtime's token, impersonating alice)."""
    config = KubeConfig.from_file(LAB / "kubeconfig").get()
    verify = verify_cluster(config.cluster, config.user, config.abs_file, trust_env=False)
    transport = kube_api._Impersonating(
        httpx2.AsyncHTTPTransport(verify=verify), "alice", ("metallo:members",)
    )
    return AsyncClient(config, trust_env=False, transport=transport)


def preparation_pod(executor: KubernetesExecutor, row: AttemptRow) -> dict:
    """A minimal preparation Pod of ``row``'s identity: runs ``true``, mounts nothing."""
    identity = stages.identity_of(row, executor.site.site_id)
    job = executor.stages.job(row)
    small = {"cpu": "10m", "memory": "16Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": object_name(row.attempt_id, "stage-in"),
            "namespace": NAMESPACE,
            "labels": identity.labels("stage-in"),
            "annotations": identity.annotations(),
        },
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {
                "runAsUser": job.member.uid,
                "runAsGroup": job.member.gid,
                "runAsNonRoot": True,
            },
            "containers": [
                {
                    "name": "stage-in",
                    "image": executor.site.helper_image,
                    "command": ["true"],
                    "resources": {"requests": small, "limits": small},
                }
            ],
        },
    }


async def prepare_round(
    executor: KubernetesExecutor, client: AsyncClient, rows: list[AttemptRow], site_id: str
) -> None:
    """Each Attempt's preparation Pod created, journalled and Succeeded (not timed)."""
    for row in rows:
        created = await client.create(codecs.from_dict(preparation_pod(executor, row)))
        executor.journal.intent(row.attempt_id, "stage-in", "Pod", created.metadata.name)
        executor.journal.created(row.attempt_id, "stage-in", created.metadata.uid)
    names = {object_name(row.attempt_id, "stage-in") for row in rows}
    admin = AsyncClient(KubeConfig.from_file(LAB / "admin.kubeconfig"), trust_env=False)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            done = {
                pod.metadata.name
                async for pod in admin.list(
                    Pod, namespace=NAMESPACE, labels={LABEL_SITE: site_id, LABEL_STAGE: "stage-in"}
                )
                if pod.status and pod.status.phase == "Succeeded"
            }
            if names <= done:
                return
            await asyncio.sleep(0.5)
        raise RuntimeError("the preparation Pods did not succeed within 300 s")
    finally:
        await admin.close()


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


async def raw_side(
    state: Path, site_id: str, count: int, concurrency: int, tag: str, client: AsyncClient
) -> float:
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

    async def one(i: int) -> None:
        await client.create(manifests[i])

    return await bounded(count, concurrency, one)


async def executor_side(
    executor: KubernetesExecutor, count: int, concurrency: int, tag: str, client: AsyncClient
) -> float:
    """One round of ``start`` commands on the run's executor (kept across rounds, as the
    Runtime keeps its own)."""
    rows = prepared(executor, count, tag)
    site_id = executor.site.site_id
    await prepare_round(executor, client, rows, site_id)
    commands = [
        SiteCommand(
            i + 1, f"{tag}-c{i}", "start", site_id, "k8s", row.run_id, row.attempt_id, 1, {}
        )
        for i, row in enumerate(rows)
    ]

    async def one(i: int) -> None:
        await executor.start(commands[i])

    elapsed = await bounded(count, concurrency, one)
    made = [executor.journal.object(row.attempt_id, "compute") for row in rows]
    if not all(obj is not None and obj.state == "created" for obj in made):
        raise RuntimeError("a start did not create its Job: nothing to compare")
    return elapsed


async def sweep(site_id: str) -> None:
    """Delete every Job of this run and its Pods (by the run's Site label)."""
    client = AsyncClient(KubeConfig.from_file(LAB / "admin.kubeconfig"), trust_env=False)
    try:
        for kind in (Job, Pod):
            async for obj in client.list(kind, namespace=ALL_NS, labels={LABEL_SITE: site_id}):
                try:
                    await client.delete(
                        kind,
                        obj.metadata.name,
                        namespace=obj.metadata.namespace,
                        cascade=CascadeType.FOREGROUND,
                        grace_period=0,
                    )
                except ApiError as error:
                    if error.status.code != 404:  # gone with its Job already
                        raise
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
    raw = started = 0.0
    client = member_client()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            executor = executor_for(base / "executor", site_id)
            try:
                await raw_side(base / "w1", site_id, 4, concurrency, "w1", client)  # warm both
                await executor_side(executor, 4, concurrency, "w2", client)
                await sweep(site_id)
                for r in range(rounds):
                    for side in ("raw", "executor") if r % 2 == 0 else ("executor", "raw"):
                        tag = f"{side[0]}{r}-{uuid.uuid4().hex[:6]}"
                        if side == "raw":
                            raw += await raw_side(
                                base / f"raw{r}", site_id, per_round, concurrency, tag, client
                            )
                        else:
                            started += await executor_side(
                                executor, per_round, concurrency, tag, client
                            )
                        await sweep(site_id)  # the namespace quota counts the round's objects
            finally:
                await executor.close()
    finally:
        await client.close()
        await sweep(site_id)
    count = rounds * per_round
    raw_rate, executor_rate = count / raw, count / started
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
                "measures": "executor start command vs raw lightkube Job create",
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
