"""kill -9 of the Runtime at each step of a k8s-job Attempt, then a restart: exactly one
PVC, one preparation Pod, one Job and one stage-out Pod, and the output pushed once."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from tests.k8s.lab import (
    Driver,
    git_out,
    make_executor,
    make_repository,
    objects_of,
    observe_until,
    payload,
)

pytestmark = pytest.mark.k8s
TERMINAL = {"succeeded", "failed", "cancelled"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_in_process(
    state_dir,
    site_id: str,
    command,
    fault: str | None = None,
    settings: dict | None = None,
    timeout: float = 120,
):
    """Run one command in a separate Runtime process that SIGKILLs itself at ``fault``
    (``settings``: more Site settings for that process; tests/k8s/runner.py)."""
    args = [
        sys.executable,
        "-m",
        "tests.k8s.runner",
        str(state_dir),
        site_id,
        json.dumps(dataclasses.asdict(command)),
    ]
    if fault:
        args.append(fault)
    env = {**os.environ, "METALLO_K8S_RUNNER_SETTINGS": json.dumps(settings or {})}
    return subprocess.run(
        args, check=False, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def wait_phase(attempt_id: str, kind: str, stage: str, done: set[str], timeout: float = 60) -> None:
    """Wait (through the administrator's view) until the stage's object has ended."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for obj in objects_of(attempt_id)[kind]:
            if obj["metadata"]["labels"].get("metallo.dev/stage") != stage:
                continue
            status = obj.get("status") or {}
            states = {
                c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"
            }
            if status.get("phase") in done or states & done:
                return
        time.sleep(0.3)
    raise AssertionError(f"{kind} {stage} of {attempt_id} did not end")


def exactly_one_of_each(executor, attempt_id: str) -> None:
    found = objects_of(attempt_id)
    stages = {
        kind: sorted(o["metadata"]["labels"]["metallo.dev/stage"] for o in items)
        for kind, items in found.items()
    }
    assert stages["PersistentVolumeClaim"] == ["workspace"], stages
    assert stages["Job"] == ["compute"], stages
    assert stages["Pod"] == ["compute", "stage-in", "stage-out"], stages
    uids = {o.role: o.uid for o in executor.journal.objects(attempt_id)}
    for kind, items in found.items():
        for obj in items:
            role = obj["metadata"]["labels"]["metallo.dev/stage"]
            if not (kind == "Pod" and role == "compute"):
                assert obj["metadata"]["uid"] == uids[role], (role, obj["metadata"]["uid"], uids)


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("prepare", "intent:workspace"),  # intent saved, create never sent
        ("prepare", "created:workspace"),  # PVC created, its answer lost
        ("prepare", "created:stage-in"),  # preparation Pod created, answer lost
        ("start", "intent:compute"),  # Job intent saved, create never sent
        ("start", "created:compute"),  # Job created, answer lost
        ("observe", "intent:stage-out"),  # stage-out intent saved, create never sent
        ("observe", "created:stage-out"),  # stage-out Pod created, answer lost
    ],
)
async def test_kill_9_at_each_step_then_restart_gives_exactly_one_object_each(
    k8s_lab, tmp_path, kind, fault
):
    state = tmp_path / "state"
    url, commit, bare = make_repository()
    executor = make_executor(state, KUBERNETES_RETENTION_SECONDS=3600)
    site = executor.site.site_id
    drv = Driver(site)
    try:
        prepare = drv.command(
            "prepare", payload(url, commit, ["/bin/sh", "-c", "echo recovered > out.txt"])
        )
        start = drv.command("start")
        if kind == "prepare":
            crashed = run_in_process(state, site, prepare, fault)
        else:
            assert (await executor.prepare(prepare)).outcome == "succeeded"
            wait_phase(drv.attempt_id, "Pod", "stage-in", {"Succeeded"})
            if kind == "observe":
                assert (await executor.start(start)).outcome == "succeeded"
                wait_phase(drv.attempt_id, "Job", "compute", {"Complete"})
                crashed = run_in_process(state, site, drv.command("observe"), fault)
            else:
                crashed = run_in_process(state, site, start, fault)
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        await executor.close()
        executor = make_executor(state, site_id=site, KUBERNETES_RETENTION_SECONDS=3600)
        if kind == "prepare":
            assert (await executor.recover(prepare)).outcome == "succeeded"
            assert (await executor.start(start)).outcome == "succeeded"
        elif kind == "start":
            assert (await executor.recover(start)).outcome == "succeeded"
        final = await observe_until(executor, drv, TERMINAL)
        assert final.observation["phase"] == "succeeded", final.observation
        exactly_one_of_each(executor, drv.attempt_id)
        pushed = final.observation["output_commit"]
        assert git_out("-C", str(bare), "rev-parse", "refs/heads/main") == pushed
        assert git_out("-C", str(bare), "rev-parse", f"{pushed}^") == commit  # one commit, once
    finally:
        await executor.close()


async def test_kill_9_during_cancellation_then_restart_replays_one_cancellation(k8s_lab, tmp_path):
    state = tmp_path / "state"
    url, commit, _ = make_repository()
    executor = make_executor(state, KUBERNETES_RETENTION_SECONDS=3600)
    site = executor.site.site_id
    drv = Driver(site)
    try:
        await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "300"])))
        await executor.start(drv.command("start"))
        await observe_until(executor, drv, {"running"})
        cancel = drv.command("cancel", {"reason": "member-request"})
        crashed = run_in_process(state, site, cancel, "deleted:compute")
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        await executor.close()
        executor = make_executor(state, site_id=site, KUBERNETES_RETENTION_SECONDS=3600)
        result = await executor.recover(cancel)
        assert (result.outcome, result.message) == ("succeeded", "accepted")
        assert (await executor.cancel(cancel)).to_json() == result.to_json()
        final = await observe_until(executor, drv, TERMINAL)
        assert final.observation["phase"] == "cancelled"
        left = objects_of(drv.attempt_id)
        assert left["Job"] == [] and left["Pod"] == [], left
        await asyncio.sleep(0)
    finally:
        await executor.close()
