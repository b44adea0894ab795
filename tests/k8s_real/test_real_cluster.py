"""The kubernetes executor's lifecycle on a real cluster (opt-in: ``METALLO_K8S_KUBECONFIG``
and the settings of docs/k8s-lab.md, "A real cluster"). The same steps as tests/k8s on
the lab: a k8s-job to completion with its output pushed, cancel while running, an exit
code kept exactly, a forbidden impersonation refused definitely."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.k8s.lab import Driver, make_executor, objects_of, observe_until, payload
from tests.k8s_real.cluster import SKIP_REASON, cluster_from_env

if cluster_from_env() is None:
    pytest.skip(SKIP_REASON, allow_module_level=True)

pytestmark = pytest.mark.k8s_real
TERMINAL = {"succeeded", "failed", "cancelled"}
EMPTY = {"Job": [], "Pod": [], "PersistentVolumeClaim": [], "Secret": []}
TIMEOUT = 600.0  # image pulls and volume provisioning on a real cluster


def _member(user: str) -> dict[str, str]:
    return {"id": f"m-{user}", "site_username": user, "account": "demo"}


def _left(cluster, attempt_id: str) -> dict:
    return objects_of(attempt_id, cluster.check_kubeconfig, cluster.namespace)


async def _started(cluster, executor, command):
    drv = Driver(executor.site.site_id)
    body = payload(cluster.repository_url, cluster.head(), command, member=_member(cluster.member))
    body["repository"]["branch"] = cluster.branch
    prepared = await executor.prepare(drv.command("prepare", body))
    assert prepared.outcome == "succeeded", prepared
    assert (await executor.start(drv.command("start"))).outcome == "succeeded"
    return drv


async def test_a_k8s_job_completes_and_its_output_commit_is_pushed(cluster, executor):
    before = cluster.head()
    drv = await _started(cluster, executor, ["/bin/sh", "-c", "date -u > metallo-k8s-real.txt"])
    final = await observe_until(executor, drv, TERMINAL, TIMEOUT)
    obs = final.observation
    assert obs["phase"] == "succeeded" and obs["exit_code"] == 0, obs
    assert obs["output_commit"] and obs["output_commit"] != before
    assert cluster.head() == obs["output_commit"]
    assert [j["stage"] for j in final.native_jobs] == ["stage-in", "compute", "stage-out"]
    end = time.monotonic() + TIMEOUT
    while drv.attempt_id in executor.journal.cleanup_pending() and time.monotonic() < end:
        await executor.tick()  # grant Secrets confirmed gone without reading them
        await asyncio.sleep(1)
    assert {o.state for o in executor.journal.objects(drv.attempt_id)} == {"deleted"}
    assert _left(cluster, drv.attempt_id) == EMPTY


async def test_cancel_while_running_deletes_the_job(cluster, executor):
    drv = await _started(cluster, executor, ["sleep", "600"])
    await observe_until(executor, drv, {"running"}, TIMEOUT)
    cancel = drv.command("cancel", {"reason": "member-request"})
    result = await executor.cancel(cancel)
    assert (result.outcome, result.observation["phase"]) == ("succeeded", "cancelled"), result
    left = _left(cluster, drv.attempt_id)
    assert left["Job"] == [] and left["Pod"] == [], json.dumps(left)
    assert (await executor.cancel(cancel)).to_json() == result.to_json()


async def test_exit_code_3_is_kept(cluster, executor):
    drv = await _started(cluster, executor, ["/bin/sh", "-c", "exit 3"])
    obs = (await observe_until(executor, drv, TERMINAL, TIMEOUT)).observation
    assert (obs["phase"], obs["exit_code"], obs["signal"]) == ("failed", 3, None), obs
    assert obs["failure"]["code"] == "compute-failed" and obs["output_commit"] is None


async def test_a_forbidden_impersonation_is_a_definite_refusal(cluster, tmp_path):
    executor = make_executor(
        tmp_path / "state", kubeconfig=cluster.kubeconfig, **cluster.executor_env()
    )
    try:
        drv = Driver(executor.site.site_id)
        body = payload(
            cluster.repository_url,
            cluster.head(),
            ["true"],
            member=_member(cluster.forbidden_member),
        )
        prepare = drv.command("prepare", body)
        result = await executor.prepare(prepare)
        assert (result.outcome, result.code) == ("refused", "native-request-denied"), result
        assert (await executor.prepare(prepare)).to_json() == result.to_json()
        assert _left(cluster, drv.attempt_id) == EMPTY
    finally:
        await executor.close()
