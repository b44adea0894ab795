"""A running compute job requeued by the Site's administrator on the Slurm lab
(docs/slurm-lab.md; docs/site-runtime.md, Reconciliation): root sets ``Requeue=1`` and
runs ``scontrol requeue``, as a fresh user's trial did. The Runtime notices the
requeue (``restart_cnt``) at the next observe: past the Site's bound (default none)
it cancels the re-run job and fails the Attempt ``slurm-job-requeued``; within the
bound the Run waits with ``native_wait`` ``slurm-job-requeued``. What a member is
shown is checked too. Run under ``flock /tmp/metallo-slurm.lock``."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time

import pytest

from execution_core.domain.end_messages import site_end_message
from execution_core.domain.observations import exit_facts
from site_runtime.application.ports import Deferred
from tests.slurm.lab import Driver, make_executor, make_repository, observe_until, payload

pytestmark = pytest.mark.slurm


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, cwd="/tmp")


def _job_field(job_id: str, field: str) -> str:
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=False
    ).stdout
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    return fields.get(field, "")


async def _observe(executor, drv):
    executor.rest.forget_list()
    try:
        return await executor.observe(drv.command("observe"))
    except Deferred:
        return None


async def _running_compute(executor, drv) -> str:
    """Start the Attempt and observe until its compute job runs; its job id."""
    url, commit, _ = make_repository()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "120"])))
    end = time.monotonic() + 60
    while True:
        try:
            await executor.start(drv.command("start"))
            break
        except Deferred:
            assert time.monotonic() < end, "start was deferred for a minute"
            await asyncio.sleep(1)
    await observe_until(executor, drv, {"running"})
    end = time.monotonic() + 60
    while (executor.journal.stages(drv.attempt_id)["compute"].native or {}).get(
        "state"
    ) != "RUNNING":
        assert time.monotonic() < end, "compute never ran"
        await asyncio.sleep(0.5)
        await _observe(executor, drv)
    compute = executor.journal.stages(drv.attempt_id)["compute"].job_id
    assert compute
    return compute


def _requeue(job_id: str) -> None:
    """What an administrator does: make the job requeueable, then requeue it."""
    _scontrol("update", f"jobid={job_id}", "Requeue=1")
    _scontrol("requeue", job_id)


def _scancel(*job_ids: str) -> None:
    subprocess.run(["scancel", *job_ids], check=False, cwd="/tmp")


async def _cleanup(executor, drv, *job_ids: str) -> None:
    _scancel(*job_ids)
    with contextlib.suppress(Deferred):
        await executor.cancel(drv.command("cancel", {"reason": "test"}))
    await executor.rest.close()
    executor.journal.close()


async def test_a_requeued_compute_job_is_cancelled_and_fails_the_attempt(
    slurm_lab, tmp_path, tokens, grants
):
    executor = make_executor(tmp_path / "state", tokens, grants)
    drv = Driver()
    compute = ""
    try:
        compute = await _running_compute(executor, drv)
        _requeue(compute)
        final = None
        end = time.monotonic() + 60
        while final is None and time.monotonic() < end:
            result = await _observe(executor, drv)
            if result and result.observation["phase"] in ("succeeded", "failed", "cancelled"):
                final = result
            else:
                await asyncio.sleep(0.5)
        assert final is not None, "the requeue was never noticed"
        obs = final.observation
        assert obs["phase"] == "failed", obs
        failure = obs["failure"]
        assert (failure["code"], failure["stage"], failure["job_id"]) == (
            "slurm-job-requeued",
            "compute",
            compute,
        )
        facts = executor.journal.stages(drv.attempt_id)["compute"].native
        assert facts["restarts"] >= 1 and facts["requeue_refused"]
        # The re-run was cancelled, not left to run the work again.
        end = time.monotonic() + 30
        while _job_field(compute, "JobState") not in ("CANCELLED", ""):
            assert time.monotonic() < end, _job_field(compute, "JobState")
            await asyncio.sleep(0.5)
        # Stage-out never ran, and later observes replay the same end.
        assert executor.journal.stages(drv.attempt_id)["stage-out"].job_id is None
        again = await _observe(executor, drv)
        assert again is not None and again.observation["failure"] == failure
        # What the member is shown (Execution Core's exit facts and reason message).
        shown = exit_facts(obs)
        assert (shown["failure_code"], shown["failure_stage"]) == ("slurm-job-requeued", "compute")
        message = site_end_message(shown["failure_code"], shown)
        assert message.startswith("the Site's scheduler requeued its compute job")
    finally:
        await _cleanup(executor, drv, *(j for j in (compute,) if j))


async def test_a_requeue_within_the_sites_bound_waits_visibly(slurm_lab, tmp_path, tokens, grants):
    executor = make_executor(tmp_path / "state", tokens, grants, env={"SLURM_COMPUTE_REQUEUES": 1})
    drv = Driver()
    compute = ""
    try:
        compute = await _running_compute(executor, drv)
        _requeue(compute)
        seen = []
        end = time.monotonic() + 60
        while time.monotonic() < end:
            result = await _observe(executor, drv)
            if result is not None:
                seen.append(result.observation)
                if result.observation.get("native_wait") == "slurm-job-requeued":
                    break
            await asyncio.sleep(0.5)
        assert seen and seen[-1].get("native_wait") == "slurm-job-requeued", seen[-3:]
        assert seen[-1]["phase"] == "running" and seen[-1]["native_stage"] == "compute"
        facts = executor.journal.stages(drv.attempt_id)["compute"].native
        assert facts["restarts"] == 1 and not facts.get("terminal")
        # A second requeue passes the bound: the Attempt fails. (slurmctld delays a
        # requeued job's start; the administrator lets it start now.)
        _scontrol("update", f"jobid={compute}", "StartTime=now")
        end = time.monotonic() + 60
        while _job_field(compute, "JobState") != "RUNNING":
            assert time.monotonic() < end, "the requeued job never ran again"
            await asyncio.sleep(1)
        _requeue(compute)
        final = await observe_until(executor, drv, {"failed", "succeeded", "cancelled"}, 60)
        assert final.observation["failure"]["code"] == "slurm-job-requeued"
    finally:
        await _cleanup(executor, drv, *(j for j in (compute,) if j))
