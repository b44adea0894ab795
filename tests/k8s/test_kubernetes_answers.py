"""Answers that leave the effect unknown — a 5xx, a malformed body, a 409 ``Conflict``
(what the API server answers a stale ``resourceVersion``) — are uncertain end to end:
the command is deferred and kept (no result saved), and its recovery finds what was
made by name, so each object exists once. Also: a Job that ends on its own during
its cancellation keeps its natural outcome."""

from __future__ import annotations

import asyncio
import time

import pytest

from site_runtime.adaptors.kubernetes.stages import SNAPSHOT_SECONDS
from site_runtime.application.ports import Deferred
from tests.k8s.faulty_api import FaultyApi, status_body
from tests.k8s.lab import (
    Driver,
    make_executor,
    make_repository,
    objects_of,
    observe_until,
    payload,
    sweep,
)
from tests.k8s.test_kubernetes_recovery import wait_phase

pytestmark = pytest.mark.k8s
TERMINAL = {"succeeded", "failed", "cancelled"}
STALE = status_body(
    409,
    "Conflict",
    'Operation cannot be fulfilled on jobs.batch "x": the object has been modified;'
    " please apply your changes to the latest version and try again",
)


@pytest.fixture
async def faulty(k8s_lab, tmp_path):
    async with FaultyApi(tmp_path / "proxy") as api:
        executor = make_executor(tmp_path / "state", kubeconfig=api.kubeconfig())
        try:
            yield api, executor
        finally:
            await executor.close()
            sweep(executor.site.site_id)


async def deferred_and_kept(executor, handle, command) -> None:
    with pytest.raises(Deferred) as deferred:
        await handle(command)
    assert deferred.value.code == "kubernetes-unavailable"
    assert executor.journal.result(command.command_id) is None  # kept: nothing answered


def counts(attempt_id: str) -> dict[str, int]:
    return {kind: len(items) for kind, items in objects_of(attempt_id).items()}


@pytest.mark.parametrize(
    ("status", "body", "forward"),
    [
        (503, None, False),  # refused before the lab saw it: nothing was created
        (503, None, True),  # created, its answer lost
        (500, b"<html>upstream broke</html>", True),
        (201, b'{"kind": "Persist', True),  # a truncated success
    ],
    ids=["503-before", "503-after", "500-html-after", "201-truncated-after"],
)
async def test_a_workspace_create_with_an_uncertain_answer_is_kept_then_recovered(
    faulty, status, body, forward
):
    api, executor = faulty
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    prepare = drv.command("prepare", payload(url, commit, ["/bin/sh", "-c", "echo a > a.txt"]))
    api.inject("POST", r"/persistentvolumeclaims$", status, body, forward=forward)
    await deferred_and_kept(executor, executor.prepare, prepare)
    assert executor.journal.object(drv.attempt_id, "workspace").state == "intent"
    assert counts(drv.attempt_id)["PersistentVolumeClaim"] == (1 if forward else 0)
    assert (await executor.recover(prepare)).outcome == "succeeded"
    assert (await executor.start(drv.command("start"))).outcome == "succeeded"
    final = await observe_until(executor, drv, TERMINAL)
    assert final.observation["phase"] == "succeeded", final.observation
    found = counts(drv.attempt_id)
    assert (found["PersistentVolumeClaim"], found["Job"]) == (1, 1), found


@pytest.mark.parametrize(
    ("status", "body"),
    [(409, STALE), (502, b""), (200, b"not json at all")],
    ids=["409-conflict", "502-empty", "200-malformed"],
)
async def test_a_job_create_with_an_uncertain_answer_is_kept_then_adopted(faulty, status, body):
    api, executor = faulty
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    prepare = drv.command("prepare", payload(url, commit, ["/bin/sh", "-c", "echo j > j.txt"]))
    assert (await executor.prepare(prepare)).outcome == "succeeded"
    wait_phase(drv.attempt_id, "Pod", "stage-in", {"Succeeded"})
    start = drv.command("start")
    api.inject("POST", r"/jobs$", status, body, forward=True)  # the Job exists, its answer lost
    await deferred_and_kept(executor, executor.start, start)
    assert executor.journal.object(drv.attempt_id, "compute").state == "intent"
    assert (await executor.recover(start)).outcome == "succeeded"
    assert executor.journal.object(drv.attempt_id, "compute").state == "created"
    final = await observe_until(executor, drv, TERMINAL)
    assert final.observation["phase"] == "succeeded", final.observation
    assert counts(drv.attempt_id)["Job"] == 1


async def test_a_malformed_list_answers_unknown_then_the_next_cycle_recovers(faulty):
    api, executor = faulty
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "2"])))
    await executor.start(drv.command("start"))
    api.inject("GET", r"/jobs\?", 200, b'{"kind": "JobList", "items": 7}', times=1)
    await asyncio.sleep(SNAPSHOT_SECONDS + 0.2)  # past the start's snapshot: a new list
    observed = await executor.observe(drv.command("observe"))
    assert observed.observation["phase"] == "unknown"  # answered with what is known
    final = await observe_until(executor, drv, TERMINAL)
    assert final.observation["phase"] == "succeeded", final.observation


async def test_an_uncertain_delete_defers_cleanup_which_finishes_later(faulty):
    api, executor = faulty
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    await executor.start(drv.command("start"))
    api.inject("DELETE", r"/persistentvolumeclaims/", 503, times=2)
    final = await observe_until(executor, drv, TERMINAL)
    assert final.observation["phase"] == "succeeded"
    await executor.tick()
    assert drv.attempt_id in executor.journal.cleanup_pending()  # deferred, not lost
    assert executor.journal.object(drv.attempt_id, "workspace").state != "deleted"
    end = time.monotonic() + 60
    while drv.attempt_id in executor.journal.cleanup_pending() and time.monotonic() < end:
        await executor.tick()
        await asyncio.sleep(0.3)
    assert {o.state for o in executor.journal.objects(drv.attempt_id)} == {"deleted"}
    assert counts(drv.attempt_id) == {"Job": 0, "Pod": 0, "PersistentVolumeClaim": 0, "Secret": 0}


@pytest.mark.parametrize(
    ("command", "natural"),
    [(["/bin/sh", "-c", "exit 3"], "failed"), (["true"], "completed")],
)
async def test_a_job_that_ends_during_its_cancellation_keeps_its_natural_outcome(
    executor, command, natural
):
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    await executor.prepare(drv.command("prepare", payload(url, commit, command)))
    wait_phase(drv.attempt_id, "Pod", "stage-in", {"Succeeded"})
    assert (await executor.start(drv.command("start"))).outcome == "succeeded"
    assert executor.journal.object(drv.attempt_id, "compute").state == "created"
    # The Job ends on its own; the Runtime has not observed that before the cancel.
    wait_phase(drv.attempt_id, "Job", "compute", {"Complete", "Failed"})
    result = await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
    assert result.outcome == "succeeded"
    compute = executor.journal.object(drv.attempt_id, "compute")
    obs = result.observation
    if natural == "failed":
        assert obs["phase"] == "failed", obs  # not cancelled: it failed by itself first
        assert (obs["exit_code"], obs["failure"]["code"]) == (3, "compute-failed")
        assert (compute.exit_code, compute.code) == (3, "compute-failed")
    else:
        # Its success is kept (exit 0, no cancellation code on the Job); the stage-out
        # does not run once the cancel arrived.
        assert obs["phase"] == "cancelled", obs
        assert (compute.exit_code, compute.signal, compute.code) == (0, None, None)
        assert executor.journal.object(drv.attempt_id, "stage-out").state == "deleted"
        assert [
            p
            for p in objects_of(drv.attempt_id)["Pod"]
            if p["metadata"]["labels"]["metallo.dev/stage"] == "stage-out"
        ] == []
