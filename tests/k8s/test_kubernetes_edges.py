"""The kubernetes executor at the edges of the API: conflicts, an unreachable API, one list
per observe cycle, log reads under a permit, and the stage grant's Secret lifecycle."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from lightkube import codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import PersistentVolumeClaim

from site_runtime.application.ports import Deferred
from site_runtime.domain.kubernetes_errors import classify
from site_runtime.domain.kubernetes_names import object_name
from tests.k8s.lab import (
    Driver,
    make_executor,
    make_repository,
    objects_of,
    observe_until,
    payload,
)
from tests.k8s.lab_clients import NAMESPACE, close, member
from tests.k8s.outage import ApiOutage
from tests.k8s.test_kubernetes_recovery import wait_phase

pytestmark = pytest.mark.k8s
TERMINAL = {"succeeded", "failed", "cancelled"}


async def test_api_unreachable_for_a_while_defers_then_recovers(k8s_lab, tmp_path):
    async with ApiOutage() as relay:
        executor = make_executor(tmp_path / "state", kubeconfig=relay.kubeconfig(tmp_path / "kc"))
        try:
            url, commit, _ = make_repository()
            drv = Driver(executor.site.site_id)
            await relay.cut()
            command = ["/bin/sh", "-c", "echo ok > ok.txt"]
            prepare = drv.command("prepare", payload(url, commit, command))
            with pytest.raises(Deferred) as deferred:
                await executor.prepare(prepare)
            assert deferred.value.code == "kubernetes-unavailable"
            await relay.restore()  # the same port again
            assert (await executor.recover(prepare)).outcome == "succeeded"
            await relay.cut()
            start = drv.command("start")
            with pytest.raises(Deferred):
                await executor.start(start)  # the command is kept, nothing was answered
            observed = await executor.observe(drv.command("observe"))
            assert observed.observation["phase"] == "unknown"  # answered with what is known
            await relay.restore()
            assert (await executor.recover(start)).outcome == "succeeded"
            final = await observe_until(executor, drv, TERMINAL)
            assert final.observation["phase"] == "succeeded", final.observation
            assert len(objects_of(drv.attempt_id)["Job"]) == 1
        finally:
            await executor.close()


async def test_a_stale_resource_version_is_an_uncertain_conflict(executor):
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "30"])))
    await executor.start(drv.command("start"))
    await observe_until(executor, drv, {"running"})
    alice = member("alice")
    try:
        job = await alice.get(Job, object_name(drv.attempt_id, "compute"), namespace=NAMESPACE)
        stale = job.metadata.resourceVersion
        job.metadata.labels["touched"] = "1"
        await alice.replace(job)
        job.metadata.resourceVersion = stale
        with pytest.raises(ApiError) as conflict:
            await alice.replace(job)
        body = conflict.value.response.json()
        assert (conflict.value.response.status_code, body["reason"]) == (409, "Conflict")
        verdict = classify(409, body, "update")
        assert (verdict.kind, verdict.code) == ("uncertain", "kubernetes-unavailable")
    finally:
        await close(alice)
    await executor.cancel(drv.command("cancel", {"reason": "member-request"}))


async def test_an_object_with_the_attempts_name_and_another_identity_is_refused(executor):
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    squatter = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": object_name(drv.attempt_id, "workspace"), "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    }
    alice = member("alice")
    try:
        await alice.create(codecs.from_dict(squatter))
        result = await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
        assert (result.outcome, result.code) == ("refused", "native-object-conflict")
        kept = await alice.get(
            PersistentVolumeClaim, squatter["metadata"]["name"], namespace=NAMESPACE
        )
        assert kept.metadata.deletionTimestamp is None  # someone else's object is left alone
        await alice.delete(PersistentVolumeClaim, squatter["metadata"]["name"], namespace=NAMESPACE)
    finally:
        await close(alice)


async def test_one_observe_cycle_lists_once_for_every_active_attempt(executor):
    drivers = []
    for _ in range(3):
        url, commit, _ = make_repository()
        drv = Driver(executor.site.site_id)
        prepared = await executor.prepare(
            drv.command("prepare", payload(url, commit, ["sleep", "60"]))
        )
        assert prepared.outcome == "succeeded", prepared
        await executor.start(drv.command("start"))
        drivers.append(drv)
    for drv in drivers:
        await observe_until(executor, drv, {"running"})
    calls: list[str] = []
    api = executor.api
    real_list, real_get = api.list, api.get

    async def counted_list(kind, selector):
        calls.append(f"list {kind}")
        return await real_list(kind, selector)

    async def counted_get(kind, namespace, name):
        calls.append(f"get {kind}")
        return await real_get(kind, namespace, name)

    api.list, api.get = counted_list, counted_get
    executor.snapshots.expire()  # a new cycle
    for drv in drivers:
        assert (await executor.observe(drv.command("observe"))).observation["phase"] == "running"
    assert calls == ["list Job", "list Pod"], calls
    api.list, api.get = real_list, real_get
    for drv in drivers:
        await executor.cancel(drv.command("cancel", {"reason": "member-request"}))


async def test_starts_arriving_together_share_one_list(executor):
    drivers = []
    for _ in range(3):
        url, commit, _ = make_repository()
        drv = Driver(executor.site.site_id)
        await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
        drivers.append(drv)
    for drv in drivers:
        wait_phase(drv.attempt_id, "Pod", "stage-in", {"Succeeded"})
    calls: list[str] = []
    api = executor.api
    real_list = api.list

    async def counted_list(kind, selector):
        calls.append(f"list {kind}")
        return await real_list(kind, selector)

    api.list = counted_list
    executor.snapshots.expire()
    try:
        started = await asyncio.gather(*(executor.start(drv.command("start")) for drv in drivers))
    finally:
        api.list = real_list
    assert [s.outcome for s in started] == ["succeeded"] * 3
    assert calls == ["list Job", "list Pod"], calls  # one list per cycle, not per start
    for drv in drivers:  # each start created its Job at once from the shared snapshot
        assert executor.journal.object(drv.attempt_id, "compute").state == "created"
        assert len(objects_of(drv.attempt_id)["Job"]) == 1


class Permits:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.checks = 0

    async def authorise_read(self, request):
        self.requests.append(request)
        return {"permit_id": "p-1"}

    async def check_read_permit(self, permit_id):
        self.checks += 1
        return {"ok": True}


async def test_read_log_from_the_pod_log_api_under_a_permit(executor):
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    await executor.prepare(
        drv.command(
            "prepare", payload(url, commit, ["/bin/sh", "-c", "echo line-one; echo line-two"])
        )
    )
    await executor.start(drv.command("start"))
    await observe_until(executor, drv, TERMINAL)
    permits = Permits()
    executor.permits = permits
    read = await executor.read_log(
        drv.command("read-log", {"stage": "compute", "max_bytes": 100000, "viewer": "m-alice"})
    )
    assert read.outcome == "succeeded", read
    assert read.observation["log"]["text"] == "line-one\nline-two\n"
    assert permits.requests[0]["path"] == "logs/compute.log" and permits.checks == 2
    tail = await executor.read_log(
        drv.command("read-log", {"stage": "compute", "max_bytes": 9, "viewer": "m-alice"})
    )
    assert tail.observation["log"]["text"] == "line-two\n" and tail.observation["log"]["truncated"]
    part = await executor.read_log(
        drv.command(
            "read-log", {"stage": "compute", "max_bytes": 5, "viewer": "m-alice", "offset": 5}
        )
    )
    assert (part.observation["log"]["text"], part.observation["log"]["offset"]) == ("one\nl", 5)


async def test_the_stage_grant_reaches_the_pod_only_through_a_short_lived_secret(executor, grants):
    drv = Driver(executor.site.site_id)
    body = payload("https://127.0.0.1:9/none.git", "a" * 40, ["true"])
    prepared = await executor.prepare(drv.command("prepare", body))
    assert prepared.outcome == "succeeded"
    found = objects_of(drv.attempt_id)
    secret = found["Secret"]
    assert len(secret) == 1 and len(grants.issued) == 1
    pod = next(
        p for p in found["Pod"] if p["metadata"]["labels"]["metallo.dev/stage"] == "stage-in"
    )
    assert grants.issued[0].token not in json.dumps(pod)
    await executor.start(drv.command("start"))
    final = await observe_until(executor, drv, TERMINAL)
    assert final.observation["failure"]["code"] == "stage-in-failed"  # no server answers there
    # Once the Pod ended: the Secret is gone and the grant revoked, before any cleanup.
    assert objects_of(drv.attempt_id)["Secret"] == []
    assert grants.released == [grants.issued[0].grant_id]
    journal = b"".join(p.read_bytes() for p in executor.journal.path.parent.iterdir())
    assert grants.issued[0].token.encode() not in journal


async def test_a_prepared_attempts_grant_secret_goes_when_its_pod_ends_before_start(
    executor, grants
):
    drv = Driver(executor.site.site_id)
    body = payload("https://127.0.0.1:9/none.git", "a" * 40, ["true"])
    assert (await executor.prepare(drv.command("prepare", body))).outcome == "succeeded"
    end = time.monotonic() + 60
    while objects_of(drv.attempt_id)["Secret"] and time.monotonic() < end:
        await executor.tick()  # the supervision pass, no start yet
        await asyncio.sleep(0.5)
    assert objects_of(drv.attempt_id)["Secret"] == []
    assert grants.released == [grants.issued[0].grant_id]
    started = await executor.start(drv.command("start"))
    assert started.observation["failure"]["code"] == "stage-in-failed"


async def test_a_start_commits_twice_and_sends_one_create(executor):
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    wait_phase(drv.attempt_id, "Pod", "stage-in", {"Succeeded"})
    calls: list[str] = []
    api = executor.api
    real_list, real_create, real_get = api.list, api.create, api.get

    async def counted_list(kind, selector):
        calls.append(f"list {kind}")
        return await real_list(kind, selector)

    async def counted_create(manifest, **kwargs):
        # The Job's intent is durable when its create is sent.
        assert executor.journal.object(drv.attempt_id, "compute").state == "intent"
        assert not executor.journal._conn.in_transaction
        calls.append(f"create {manifest['kind']}")
        return await real_create(manifest, **kwargs)

    async def counted_get(kind, namespace, name):
        calls.append(f"get {kind}")
        return await real_get(kind, namespace, name)

    api.list, api.create, api.get = counted_list, counted_create, counted_get
    executor.snapshots.expire()
    start = drv.command("start")
    before = executor.journal.commits
    try:
        started = await executor.start(start)
    finally:
        api.list, api.create, api.get = real_list, real_create, real_get
    assert started.outcome == "succeeded"
    # One commit with the Job's intent (the start's progress with it), one with the
    # result: nothing is left uncommitted when the answer is given.
    assert executor.journal.commits - before == 2
    assert not executor.journal._conn.in_transaction
    assert calls == ["list Job", "list Pod", "create Job"], calls
    assert executor.journal.object(drv.attempt_id, "compute").state == "created"
    replayed = await executor.start(start)
    assert replayed == started and executor.journal.commits - before == 2
    await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
