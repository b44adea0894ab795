"""The stage helpers' logs outlive their Pods: the Runtime keeps a helper Pod's log
before it deletes the Pod, so ``read-log`` of ``stage-in`` and ``stage-out`` answers
the helper's text after the Pod is gone (docs/site-runtime.md, Kubernetes: Logs)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.k8s.lab import Driver, objects_of, observe_until, started

pytestmark = pytest.mark.k8s
TERMINAL = {"succeeded", "failed", "cancelled"}
HELPERS = ("stage-in", "stage-out")


class Permits:
    """An edge that permits every read."""

    async def authorise_read(self, request):
        return {"permit_id": "p-1"}

    async def check_read_permit(self, permit_id):
        return {"ok": True}


def helper_pods(attempt_id: str) -> list[str]:
    """The stages of the Attempt's helper Pods that still exist."""
    return [p["metadata"]["labels"]["metallo.dev/stage"] for p in objects_of(attempt_id)["Pod"]
            if p["metadata"]["labels"]["metallo.dev/stage"] in HELPERS]


async def read(executor, drv: Driver, stage: str, **extra) -> dict:
    done = await executor.read_log(drv.command(
        "read-log", {"stage": stage, "max_bytes": 100000, "viewer": "m-alice", **extra}))
    assert done.outcome == "succeeded", done
    return done.observation["log"]


async def test_read_log_of_the_helpers_answers_their_text_after_their_pods_are_gone(executor):
    drv = await started(executor, ["/bin/sh", "-c", "echo hi"])
    final = await observe_until(executor, drv, TERMINAL)
    assert final.observation["phase"] == "succeeded", final.observation
    end = time.monotonic() + 60
    while helper_pods(drv.attempt_id) and time.monotonic() < end:
        await executor.tick()  # the cleanup pass deletes the helper Pods
        await asyncio.sleep(0.5)
    assert helper_pods(drv.attempt_id) == []
    executor.permits = Permits()

    for stage in HELPERS:
        log = await read(executor, drv, stage)
        assert f'"stage": "{stage}"' in log["text"], (stage, log)
        assert log["text"].rstrip().splitlines()[-1].startswith("metallo-stage-result ")
        # Offsets read the kept log as they read a live one.
        part = await read(executor, drv, stage, offset=3, max_bytes=5)
        assert (part["text"], part["offset"]) == (log["text"][3:8], 3)


async def test_a_cancel_keeps_the_stage_in_log_of_the_pod_it_deletes(executor):
    drv = await started(executor, ["sleep", "300"])
    await observe_until(executor, drv, {"running"})
    cancelled = await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
    assert cancelled.observation["phase"] == "cancelled"
    assert helper_pods(drv.attempt_id) == []  # the cancel deleted them before answering
    executor.permits = Permits()

    log = await read(executor, drv, "stage-in")
    assert '"stage": "stage-in"' in log["text"] and "metallo-stage-result" in log["text"]
    assert (await read(executor, drv, "stage-out"))["text"] == ""  # it never ran
