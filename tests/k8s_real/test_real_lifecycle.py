"""The rest of the lab lane's lifecycle on a real cluster (opt-in: ``METALLO_K8S_KUBECONFIG``;
docs/k8s-lab.md, "A real cluster"): cancel before start, a Pod that cannot be scheduled
and an image that cannot be pulled (wait codes, then cancel), a signal kept exactly,
quota exceeded as a definite refusal, a Job that ends during its cancellation, and
kill -9 of the Runtime at each step then a restart (exactly one object of each).

The namespace needs a ResourceQuota with ``requests.storage`` for the quota test;
``METALLO_K8S_UNSCHEDULABLE_CPUS`` (default 4096) must exceed every node."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.k8s.lab import (
    Driver,
    make_executor,
    objects_of,
    observe_until,
    payload,
    storage_quota_mib,
)
from tests.k8s.test_kubernetes_recovery import run_in_process
from tests.k8s_real.cluster import SKIP_REASON, cluster_from_env

if cluster_from_env() is None:
    pytest.skip(SKIP_REASON, allow_module_level=True)

pytestmark = pytest.mark.k8s_real
TERMINAL = {"succeeded", "failed", "cancelled"}
EMPTY = {"Job": [], "Pod": [], "PersistentVolumeClaim": [], "Secret": []}
TIMEOUT = 600.0


def _member(user: str) -> dict[str, str]:
    return {"id": f"m-{user}", "site_username": user, "account": "demo"}


def _left(cluster, attempt_id: str) -> dict:
    return objects_of(attempt_id, cluster.check_kubeconfig, cluster.namespace)


def _body(cluster, command, user: str | None = None, **resources):
    body = payload(
        cluster.repository_url,
        cluster.head(),
        command,
        member=_member(user or cluster.member),
        **resources,
    )
    body["repository"]["branch"] = cluster.branch
    return body


def _wait_ended(cluster, attempt_id: str, kind: str, stage: str, done: set[str]) -> None:
    end = time.monotonic() + TIMEOUT
    while time.monotonic() < end:
        for obj in _left(cluster, attempt_id)[kind]:
            if obj["metadata"]["labels"].get("metallo.dev/stage") != stage:
                continue
            status = obj.get("status") or {}
            true = {c["type"] for c in status.get("conditions") or [] if c["status"] == "True"}
            if status.get("phase") in done or true & done:
                return
        time.sleep(2)
    raise AssertionError(f"{kind} {stage} of {attempt_id} did not end")


async def _cancelled(executor, drv) -> None:
    result = await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
    assert (result.outcome, result.observation["phase"]) == ("succeeded", "cancelled"), result


async def test_cancel_before_start_ends_without_a_job(cluster, executor):
    drv = Driver(executor.site.site_id)
    assert (await executor.prepare(drv.command("prepare", _body(cluster, ["true"])))).outcome == (
        "succeeded"
    )
    await _cancelled(executor, drv)
    assert (await executor.start(drv.command("start"))).observation["phase"] == "cancelled"
    assert _left(cluster, drv.attempt_id)["Job"] == []


@pytest.mark.parametrize("wait", ["kubernetes-unschedulable", "kubernetes-image-pull"])
async def test_a_waiting_pod_shows_its_code_then_cancel(cluster, tmp_path, wait):
    env = dict(cluster.executor_env())
    resources = {}
    if wait == "kubernetes-image-pull":
        env["KUBERNETES_JOB_IMAGE"] = "registry.invalid/metallo-none:1"
    else:
        resources["cpus"] = int(os.environ.get("METALLO_K8S_UNSCHEDULABLE_CPUS", "4096"))
    executor = make_executor(tmp_path / "state", kubeconfig=cluster.kubeconfig, **env)
    try:
        drv = Driver(executor.site.site_id)
        body = _body(cluster, ["true"], **resources)
        assert (await executor.prepare(drv.command("prepare", body))).outcome == "succeeded"
        assert (await executor.start(drv.command("start"))).outcome == "succeeded"
        await observe_until(executor, drv, {"queued"}, TIMEOUT, wait=wait)
        await _cancelled(executor, drv)
        left = _left(cluster, drv.attempt_id)
        assert left["Job"] == [] and left["Pod"] == [], json.dumps(left)
    finally:
        await executor.close()


async def test_a_signal_is_kept_exactly(cluster, executor):
    drv = Driver(executor.site.site_id)
    await executor.prepare(drv.command("prepare", _body(cluster, ["/bin/sh", "-c", "kill -9 $$"])))
    await executor.start(drv.command("start"))
    obs = (await observe_until(executor, drv, TERMINAL, TIMEOUT)).observation
    assert (obs["phase"], obs["exit_code"], obs["signal"]) == ("failed", 137, 9), obs


async def test_quota_exceeded_is_a_definite_refusal_leaving_nothing(cluster, tmp_path):
    quota = storage_quota_mib(cluster.namespace, cluster.check_kubeconfig)
    env = {**cluster.executor_env(), "KUBERNETES_WORKSPACE_MIB": str(quota + 1024)}
    executor = make_executor(tmp_path / "state", kubeconfig=cluster.kubeconfig, **env)
    try:
        drv = Driver(executor.site.site_id)
        result = await executor.prepare(drv.command("prepare", _body(cluster, ["true"])))
        assert (result.outcome, result.code) == ("refused", "native-request-denied"), result
        assert _left(cluster, drv.attempt_id) == EMPTY
        assert {o.state for o in executor.journal.objects(drv.attempt_id)} <= {"deleted"}
    finally:
        await executor.close()


async def test_a_job_that_fails_during_its_cancellation_keeps_its_outcome(cluster, executor):
    drv = Driver(executor.site.site_id)
    await executor.prepare(drv.command("prepare", _body(cluster, ["/bin/sh", "-c", "exit 3"])))
    _wait_ended(cluster, drv.attempt_id, "Pod", "stage-in", {"Succeeded"})
    await executor.start(drv.command("start"))
    _wait_ended(cluster, drv.attempt_id, "Job", "compute", {"Failed"})
    result = await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
    assert (result.observation["phase"], result.observation["exit_code"]) == ("failed", 3)


def _run_in_process(cluster, state_dir, site_id: str, command, fault: str):
    settings = {
        **cluster.executor_env(),
        "KUBERNETES_KUBECONFIG": str(cluster.kubeconfig),
        "KUBERNETES_RETENTION_SECONDS": "3600",
        "grants": "cluster",
    }
    return run_in_process(state_dir, site_id, command, fault, settings, timeout=TIMEOUT)


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("prepare", "intent:workspace"),
        ("prepare", "created:workspace"),
        ("prepare", "intent:stage-in-secret"),
        ("prepare", "created:stage-in-secret"),
        ("prepare", "created:stage-in"),
        ("start", "intent:compute"),
        ("start", "created:compute"),
        ("observe", "created:stage-out-secret"),
        ("observe", "created:stage-out"),
    ],
)
async def test_kill_9_at_each_step_then_restart_gives_exactly_one_object_each(
    cluster, grants, tmp_path, kind, fault
):
    state = tmp_path / "state"
    env = {**cluster.executor_env(), "KUBERNETES_RETENTION_SECONDS": "3600"}
    executor = make_executor(state, grants=grants, kubeconfig=cluster.kubeconfig, **env)
    site = executor.site.site_id
    drv = Driver(site)
    try:
        prepare = drv.command("prepare", _body(cluster, ["/bin/sh", "-c", "date -u > k9.txt"]))
        start = drv.command("start")
        if kind == "prepare":
            crashed = _run_in_process(cluster, state, site, prepare, fault)
        else:
            assert (await executor.prepare(prepare)).outcome == "succeeded"
            _wait_ended(cluster, drv.attempt_id, "Pod", "stage-in", {"Succeeded"})
            if kind == "observe":
                assert (await executor.start(start)).outcome == "succeeded"
                _wait_ended(cluster, drv.attempt_id, "Job", "compute", {"Complete"})
                crashed = _run_in_process(cluster, state, site, drv.command("observe"), fault)
            else:
                crashed = _run_in_process(cluster, state, site, start, fault)
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        await executor.close()
        executor = make_executor(
            state, grants=grants, site_id=site, kubeconfig=cluster.kubeconfig, **env
        )
        if kind == "prepare":
            assert (await executor.recover(prepare)).outcome == "succeeded"
            assert (await executor.start(start)).outcome == "succeeded"
        elif kind == "start":
            assert (await executor.recover(start)).outcome == "succeeded"
        final = await observe_until(executor, drv, TERMINAL, TIMEOUT)
        assert final.observation["phase"] == "succeeded", final.observation
        found = _left(cluster, drv.attempt_id)
        stages = {
            k: sorted(o["metadata"]["labels"]["metallo.dev/stage"] for o in items)
            for k, items in found.items()
        }
        assert stages["PersistentVolumeClaim"] == ["workspace"], stages
        assert stages["Job"] == ["compute"], stages
        assert stages["Pod"] == ["compute", "stage-in", "stage-out"], stages
        assert stages["Secret"] == [], stages
    finally:
        await executor.close()
