"""Reconciliation, requeueing and native waits of the slurm executor on the real lab
(docs/site-runtime.md, Reconciliation). Run under ``flock /tmp/metallo-slurm.lock``:
some tests set the lab's node DOWN or hold jobs, and restore it before they end."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from site_runtime.application.ports import Deferred
from tests.slurm.lab import (
    LAB,
    Driver,
    make_executor,
    make_repository,
    observe_until,
    payload,
    sacct_jobs,
)
from tests.slurm.test_slurm_executor import _Permits

pytestmark = pytest.mark.slurm

TERMINAL = {"succeeded", "failed", "cancelled"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE = "vm"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a lab command (scontrol, scancel, sbatch) and return what it printed."""
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, cwd="/tmp")


def show_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=False
    ).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def node_state() -> str:
    out = subprocess.run(
        ["sinfo", "-h", "-n", NODE, "-o", "%T"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


async def accounted(attempt_id: str, job_id: str) -> list[dict[str, str]]:
    """Accounting's rows of ``job_id`` (one per run of it), once slurmdbd has any."""
    end = time.monotonic() + 30
    while True:
        rows = [r for r in sacct_jobs(f"metallo-{attempt_id}") if r["job_id"] == job_id]
        if rows or time.monotonic() > end:
            return rows
        await asyncio.sleep(0.5)


async def observe_wait(executor, drv, wanted: str | None = None) -> dict:
    """Observe until the observation names a native wait (``wanted`` when given):
    slurmctld gives a job its Reason at its next scheduling pass."""
    end = time.monotonic() + 30
    while True:
        executor.rest.forget_list()
        obs = (await executor.observe(drv.command("observe"))).observation
        wait = obs["native_wait"]
        if (wait and wanted in (None, wait)) or time.monotonic() > end:
            return obs
        await asyncio.sleep(0.5)


async def observe_recording_requeue(executor, drv, phases, seen: dict[str, str]):
    """Observe until ``phases``, recording each stage job's ``Requeue`` while slurmctld has it."""
    end = time.monotonic() + 150
    while time.monotonic() < end:
        try:
            result = await executor.observe(drv.command("observe"))
        except Deferred:
            result = None
        for stage in executor.journal.stages(drv.attempt_id).values():
            if stage.job_id and stage.job_id not in seen:
                shown = show_job(stage.job_id)
                if "Requeue" in shown:
                    seen[stage.job_id] = shown["Requeue"]
        if result and result.observation and result.observation["phase"] in phases:
            return result
        await asyncio.sleep(0.3)
    raise AssertionError(f"phase not in {phases}")


async def test_every_stage_job_is_submitted_with_requeue_disabled(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    started = await executor.start(drv.command("start"))
    seen = {started.native_jobs[0]["job_id"]: show_job(started.native_jobs[0]["job_id"])["Requeue"]}
    final = await observe_recording_requeue(executor, drv, TERMINAL, seen)
    assert final.observation["phase"] == "succeeded"
    assert len(seen) == 3 and set(seen.values()) == {"0"}, seen


async def test_an_administrators_requeue_is_refused_and_the_attempt_is_not_rerun(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "4"])))
    await executor.start(drv.command("start"))
    running = await observe_until(executor, drv, {"running"})
    compute = running.native_jobs[-1]["job_id"]
    requeue = sh("scontrol", "requeue", compute, check=False)
    assert requeue.returncode != 0, requeue.stdout  # Requeue=0: slurmctld refuses it
    final = await observe_until(executor, drv, TERMINAL)
    assert final.observation["phase"] == "succeeded"
    runs = await accounted(drv.attempt_id, compute)
    assert len(runs) == 1, runs


async def test_a_node_set_down_during_compute_fails_the_attempt_node_failure_ran_once(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "120"])))
    await executor.start(drv.command("start"))
    running = await observe_until(executor, drv, {"running"})
    compute = running.native_jobs[-1]["job_id"]
    try:
        sh("scontrol", "update", f"NodeName={NODE}", "State=DOWN", "Reason=metallo-test")
        final = await observe_until(executor, drv, TERMINAL, timeout=90)
    finally:
        # ReturnToService=2 may bring the node back by itself; RESUME only a down one.
        end = time.monotonic() + 60
        while time.monotonic() < end:
            state = node_state()
            if "down" in state or "drain" in state:
                sh("scontrol", "update", f"NodeName={NODE}", "State=RESUME", check=False)
            elif state in ("idle", "mixed", "allocated"):
                break
            await asyncio.sleep(1)
    obs = final.observation
    assert obs["phase"] == "failed", obs
    assert (obs["failure"]["stage"], obs["failure"]["code"]) == ("compute", "node-failure")
    assert obs["failure"]["scheduler_state"] == "NODE_FAIL"
    assert show_job(compute).get("Restarts", "0") == "0"
    rows = await accounted(drv.attempt_id, compute)
    assert len(rows) == 1 and rows[0]["state"].startswith("NODE_FAIL"), rows


async def test_a_job_gone_from_slurmctld_and_accounting_ends_native_evidence_lost(
    slurm_lab, tmp_path, tokens, grants
):
    executor = make_executor(
        tmp_path / "state", tokens, grants, env={"SLURM_LOST_DEADLINE_SECONDS": 2}
    )
    try:
        url, commit, _ = make_repository()
        drv = Driver()
        await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
        started = await executor.start(drv.command("start"))
        real = started.native_jobs[0]["job_id"]
        sh("scancel", real)
        # The saved job id now names no job slurmctld or slurmdbd knows.
        executor.journal.update_stage(drv.attempt_id, "stage-in", job_id="99999999")
        first = await executor.observe(drv.command("observe"))
        obs = first.observation
        assert (obs["phase"], obs["confidence"], obs["native_stage"]) == (
            "queued",
            "stale",
            "stage-in",
        )
        facts = executor.journal.stages(drv.attempt_id)["stage-in"].native
        assert facts["lost_deadline"] > time.time()
        await asyncio.sleep(2.2)
        final = await executor.observe(drv.command("observe"))
        assert final.observation["phase"] == "failed"
        assert final.observation["failure"]["code"] == "native-evidence-lost"
        assert (await executor.observe(drv.command("observe"))).observation == final.observation
    finally:
        await executor.rest.close()
        executor.journal.close()


async def test_one_attempt_whose_state_cannot_be_obtained_does_not_hold_another(
    slurm_lab, tmp_path, tokens, grants
):
    executor = make_executor(
        tmp_path / "state", tokens, grants, env={"SLURM_ATTEMPT_PENDING_SECONDS": 1}
    )
    try:
        url, commit, _ = make_repository()
        stuck, other = Driver(), Driver()
        await executor.prepare(stuck.command("prepare", payload(url, commit, ["sleep", "300"])))
        await executor.start(stuck.command("start"))
        await observe_until(executor, stuck, {"queued", "running"})
        # Its member token is refused from now on: its native state cannot be read.
        tokens.override[stuck.attempt_id] = tokens.forged(kid="unknown-kid")
        executor.rest.forget_list()  # a shared list read with another token would answer
        with pytest.raises(Deferred):
            await executor.observe(stuck.command("observe"))

        # Meanwhile the other Attempt is launched, observed, read and cancelled.
        executor.authority = _Permits()
        await executor.prepare(other.command("prepare", payload(url, commit, ["sleep", "300"])))
        assert (await executor.start(other.command("start"))).outcome == "succeeded"
        await observe_until(executor, other, {"running"})
        read = await executor.read_log(
            other.command(
                "read-log", {"stage": "stage-in", "max_bytes": 10000, "viewer": "m-alice"}
            )
        )
        assert read.outcome == "succeeded" and "exit status 0" in read.observation["log"]["text"]
        cancelled = await executor.cancel(other.command("cancel", {"reason": "test"}))
        assert cancelled.message == "accepted"

        # Past the bound the stuck Attempt's observe answers with what is known.
        await asyncio.sleep(1.1)
        executor.rest.forget_list()
        known = await executor.observe(stuck.command("observe"))
        obs = known.observation
        assert obs["phase"] in ("queued", "running") and obs["confidence"] == "stale", obs
        assert obs["native_stage"] in ("stage-in", "compute")
    finally:
        tokens.override.clear()
        for drv in (stuck, other):
            try:
                await executor.cancel(drv.command("cancel", {"reason": "test"}))
            except Deferred:
                pass
        await executor.rest.close()
        executor.journal.close()


async def test_a_pending_job_reports_its_wait_and_a_held_job_released_by_hand_goes_on(
    executor,
):
    url, commit, _ = make_repository()
    blocker = sh(
        *("runuser", "-u", "alice", "--", "sbatch", "--parsable", "-A", "demo", "-p", "staging"),
        *("--exclusive", "-o", "/dev/null", "-t", "5", "--wrap", "sleep 120"),
    ).stdout.strip()
    drv = Driver()
    try:
        end = time.monotonic() + 30
        while show_job(blocker).get("JobState") != "RUNNING" and time.monotonic() < end:
            await asyncio.sleep(0.5)
        await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
        started = await executor.start(drv.command("start"))
        stage_in = started.native_jobs[0]["job_id"]
        obs = await observe_wait(executor, drv)
        assert (obs["phase"], obs["native_state"], obs["native_stage"]) == (
            "queued",
            "PENDING",
            "stage-in",
        )
        assert obs["native_wait"] in ("slurm-resources", "slurm-priority"), obs
        sh("scontrol", "hold", stage_in)
        executor.rest.forget_list()
        held = await observe_wait(executor, drv, "slurm-held-admin")
        assert held["native_wait"] == "slurm-held-admin", held
        sh("scancel", blocker)
        sh("scontrol", "release", stage_in)
        final = await observe_until(executor, drv, TERMINAL)
        assert final.observation["phase"] == "succeeded"
        assert final.observation["native_wait"] is None
    finally:
        sh("scancel", blocker, check=False)


def stop_slurmdbd() -> None:
    """Stop the lab's slurmdbd (SIGTERM to the pid scripts/slurm-lab recorded)."""
    pid = int((LAB / "run" / "slurmdbd.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < end:
        time.sleep(0.1)


async def test_slurmdbd_stopped_while_a_job_leaves_slurmctld_then_started_again(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    started = await executor.start(drv.command("start"))
    stage_in = started.native_jobs[0]["job_id"]
    try:
        stop_slurmdbd()
        end = time.monotonic() + 150
        while show_job(stage_in) and time.monotonic() < end:
            await asyncio.sleep(1)
        assert not show_job(stage_in), "stage-in never left slurmctld"
        executor.rest.forget_list()
        blind = (await executor.observe(drv.command("observe"))).observation
        # Gone from the queue, accounting unreachable: nothing is concluded.
        assert (blind["phase"], blind["confidence"]) == ("queued", "uncertain"), blind
        facts = executor.journal.stages(drv.attempt_id)["stage-in"].native
        assert not facts["terminal"] and facts["lost_deadline"] > time.time()
    finally:
        sh(str(Path(ROOT) / "scripts" / "slurm-lab"), "up")
    final = await observe_until(executor, drv, TERMINAL, timeout=150)
    assert final.observation["phase"] == "succeeded", final.observation
    facts = executor.journal.stages(drv.attempt_id)["stage-in"].native
    assert (facts["state"], facts["source"]) == ("COMPLETED", "slurmdbd")


async def test_cancellation_racing_completion_ends_one_way_only(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    await executor.start(drv.command("start"))
    await observe_until(executor, drv, {"running", "succeeded"})
    cancelled = await executor.cancel(drv.command("cancel", {"reason": "test"}))
    assert cancelled.message in ("accepted", "already-terminal")
    final = await observe_until(executor, drv, TERMINAL)
    phase = final.observation["phase"]
    assert phase in ("succeeded", "cancelled"), final.observation
    if cancelled.message == "already-terminal":
        assert phase == "succeeded"
    again = await observe_until(executor, drv, TERMINAL)
    assert again.observation == final.observation  # terminal evidence never changes


async def test_a_compute_job_past_its_wall_time_fails_wall_time_exceeded(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    spec = payload(url, commit, ["sleep", "600"], wallTimeSeconds=60)
    await executor.prepare(drv.command("prepare", spec))
    await executor.start(drv.command("start"))
    final = await observe_until(executor, drv, TERMINAL, timeout=240)
    failure = final.observation["failure"]
    assert final.observation["phase"] == "failed", final.observation
    assert (failure["stage"], failure["scheduler_state"], failure["code"]) == (
        "compute",
        "TIMEOUT",
        "wall-time-exceeded",
    )
