"""Lifecycle of k8s-job Attempts on the lab: cancellation, waits, exact ends, refusals."""

from __future__ import annotations

import json
import time

import pytest

from tests.k8s.lab import (
    Driver,
    make_executor,
    make_repository,
    objects_of,
    observe_until,
    payload,
    storage_quota_mib,
)
from tests.k8s.lab import started as _started

pytestmark = pytest.mark.k8s
TERMINAL = {"succeeded", "failed", "cancelled"}
GPU = '{"a100": {"resource": "nvidia.com/gpu"}}'


def nothing_left(attempt_id: str) -> None:
    left = objects_of(attempt_id)
    assert left == {"Job": [], "Pod": [], "PersistentVolumeClaim": [], "Secret": []}, json.dumps(
        left
    )


async def _cancel(executor, drv):
    cancel = drv.command("cancel", {"reason": "member-request"})
    began = time.monotonic()
    result = await executor.cancel(cancel)
    assert (result.outcome, result.message) == ("succeeded", "accepted"), result
    assert result.observation["phase"] == "cancelled"
    # Absence was confirmed before the answer: no Job or Pod of the Attempt is left.
    left = objects_of(drv.attempt_id)
    assert left["Job"] == [] and left["Pod"] == [], left
    assert (await executor.cancel(cancel)).to_json() == result.to_json()  # replayed exactly
    return time.monotonic() - began


async def test_cancel_while_running_deletes_the_job_and_replays_the_answer(executor):
    drv = await _started(executor, ["sleep", "300"])
    running = await observe_until(executor, drv, {"running"})
    assert running.observation["native_state"] == "Running"
    await _cancel(executor, drv)
    final = await executor.observe(drv.command("observe"))
    assert final.observation["phase"] == "cancelled"
    await executor.tick()
    nothing_left(drv.attempt_id)


async def test_unschedulable_pod_shows_its_wait_code_then_cancel(k8s_lab, tmp_path):
    executor = make_executor(tmp_path / "state", KUBERNETES_GPU_CLASSES=GPU)
    try:
        drv = await _started(executor, ["true"], gpus=1, gpuClass="a100")
        waiting = await observe_until(
            executor, drv, {"queued"}, wait="kubernetes-unschedulable"
        )
        assert waiting.observation["native_state"] == "Pending"
        assert "Insufficient" not in json.dumps(waiting.to_json())  # a code, never provider text
        await _cancel(executor, drv)
        await executor.tick()
        nothing_left(drv.attempt_id)
    finally:
        await executor.close()


async def test_an_image_the_lab_does_not_have_waits_with_image_code(k8s_lab, tmp_path):
    executor = make_executor(tmp_path / "state", KUBERNETES_JOB_IMAGE="registry.invalid/none:1")
    try:
        drv = await _started(executor, ["true"])
        await observe_until(executor, drv, {"queued"}, wait="kubernetes-image-pull")
        await _cancel(executor, drv)
    finally:
        await executor.close()


@pytest.mark.parametrize(
    ("command", "exit_code", "signal"),
    [(["/bin/sh", "-c", "exit 3"], 3, None), (["/bin/sh", "-c", "kill -9 $$"], 137, 9)],
)
async def test_exit_code_and_signal_are_kept_exactly(executor, command, exit_code, signal):
    drv = await _started(executor, command)
    final = await observe_until(executor, drv, TERMINAL)
    obs = final.observation
    assert obs["phase"] == "failed", obs
    assert (obs["exit_code"], obs["signal"]) == (exit_code, signal)
    assert obs["failure"]["code"] == "compute-failed" and obs["failure"]["stage"] == "compute"
    assert obs["output_commit"] is None
    assert [j["stage"] for j in final.native_jobs] == ["stage-in", "compute"]  # no stage-out


async def test_cancel_before_start_ends_without_a_job(executor):
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    result = await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
    assert (result.outcome, result.message) == ("succeeded", "accepted")
    assert (await executor.start(drv.command("start"))).observation["phase"] == "cancelled"
    await executor.tick()
    nothing_left(drv.attempt_id)
    assert objects_of(drv.attempt_id)["Job"] == []


@pytest.mark.parametrize(
    ("member", "env", "code"),
    [
        # The Runtime may not impersonate a user the governance file does not bind.
        (
            {"id": "m-mallory", "site_username": "mallory", "account": "demo"},
            {"KUBERNETES_RUN_AS": '{"mallory": [1001, 1001]}'},
            "native-request-denied",
        ),
        # bob holds runs.read only: his Project role does not allow creates.
        ({"id": "m-bob", "site_username": "bob", "account": "demo"}, {}, "native-request-denied"),
        # A workspace larger than the namespace's ResourceQuota (requests.storage).
        (None, {"KUBERNETES_WORKSPACE_MIB": "above-quota"}, "native-request-denied"),
    ],
)
async def test_refusals_are_definite_and_leave_nothing_behind(k8s_lab, tmp_path, member, env, code):
    if env.get("KUBERNETES_WORKSPACE_MIB") == "above-quota":
        env = {"KUBERNETES_WORKSPACE_MIB": str(storage_quota_mib() + 1024)}
    executor = make_executor(tmp_path / "state", **env)
    try:
        url, commit, _ = make_repository()
        drv = Driver(executor.site.site_id)
        prepare = drv.command("prepare", payload(url, commit, ["true"], member=member))
        result = await executor.prepare(prepare)
        assert (result.outcome, result.code) == ("refused", code), result
        assert (await executor.prepare(prepare)).to_json() == result.to_json()
        nothing_left(drv.attempt_id)
        assert all(o.state == "deleted" for o in executor.journal.objects(drv.attempt_id))
        start = await executor.start(drv.command("start"))
        assert (start.outcome, start.code) == ("refused", "attempt-not-prepared")
    finally:
        await executor.close()


async def test_preparation_asks_current_authority_and_a_refusal_changes_nothing(
    executor, authority
):
    authority.refuse = True
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    result = await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    assert (result.outcome, result.code) == ("refused", "authorisation-refused")
    assert "member-not-in-project" in result.message
    assert authority.requests[0]["material_digest"].startswith("sha256:")
    assert authority.requests[0]["site_username"] == "alice"
    nothing_left(drv.attempt_id)
    assert executor.journal.objects(drv.attempt_id) == []
