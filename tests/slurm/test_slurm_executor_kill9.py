"""The slurm executor's Runtime killed with SIGKILL (kill -9) at each step of an Attempt on the
real Slurm lab, then restarted: exactly one native job per stage, and a cancellation
interrupted by the kill is replayed once (docs/slurm-lab.md; docs/site-runtime.md).

Needs ``scripts/slurm-lab up`` (scripts/test runs it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import time

import pytest

from site_runtime.application.ports import Deferred
from tests.slurm.lab import (
    Driver,
    git,
    make_executor,
    make_repository,
    observe_until,
    payload,
    squeue_jobs,
)
from tests.slurm.test_slurm_executor import (
    ROOT,
    TERMINAL,
    one_job_per_stage,
    sacct_state,
)

pytestmark = pytest.mark.slurm


async def wait_completed(job_id: str, timeout: float = 120.0) -> None:
    """Wait until Slurm reports ``job_id`` COMPLETED (without asking the executor)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sacct_state(job_id) == "COMPLETED":
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"job {job_id} did not complete")


def run_in_process(state_dir, command, fault: str | None = None) -> subprocess.CompletedProcess:
    """Run one command in a separate Runtime process that SIGKILLs itself at ``fault``."""
    args = [
        sys.executable,
        "-m",
        "tests.slurm.runner",
        str(state_dir),
        json.dumps(dataclasses.asdict(command)),
    ]
    if fault:
        args.append(fault)
    return subprocess.run(args, check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("start", "intent:stage-in"),  # intent saved, POST never sent
        ("start", "posted:stage-in"),  # POST answered, job id not saved
        ("observe", "posted:compute"),  # between stages: compute's answer lost
        ("observe", "held:stage-out"),  # job id saved, not yet released
    ],
)
async def test_kill_9_at_each_step_then_restart_gives_exactly_one_job_per_stage(
    slurm_lab, tmp_path, tokens, grants, kind, fault
):
    state = tmp_path / "state"
    url, commit, bare = make_repository()
    drv = Driver()
    executor = make_executor(state, tokens, grants)
    try:
        command = {"shell": "echo recovered > out.txt"}  # an output to push
        await executor.prepare(drv.command("prepare", payload(url, commit, command)))
        start = drv.command("start")
        if kind == "observe":
            await executor.start(start)
            stage = fault.split(":")[1]
            prior = "stage-in" if stage == "compute" else "compute"
            if prior == "compute":
                # Drive the chain here until compute is submitted, and no further.
                end = time.monotonic() + 120
                while executor.journal.stages(drv.attempt_id)["compute"].state != "submitted":
                    assert time.monotonic() < end, "compute was not submitted"
                    try:
                        await executor.observe(drv.command("observe"))
                    except Deferred:
                        pass
                    await asyncio.sleep(0.3)
            await wait_completed(executor.journal.stages(drv.attempt_id)[prior].job_id)
            # The next observation submits the next stage, in a process that dies.
            crashed = run_in_process(state, drv.command("observe"), fault)
        else:
            crashed = run_in_process(state, start, fault)
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        # Restart: a fresh executor on the same journal recovers and finishes the Attempt.
        await executor.rest.close()
        executor.journal.close()
        executor = make_executor(state, tokens, grants)
        if kind == "start":
            recovered = await executor.recover(start)
            assert recovered.outcome == "succeeded"
        final = await observe_until(executor, drv, TERMINAL)
        assert final.observation["phase"] == "succeeded", final.observation
        one_job_per_stage(drv.attempt_id, ("stage-in", "compute", "stage-out"))
        pushed = final.observation["output_commit"]
        assert git("-C", str(bare), "rev-parse", "refs/heads/main") == pushed
        assert git("-C", str(bare), "rev-parse", f"{pushed}^") == commit  # one commit, once
    finally:
        await executor.rest.close()


async def test_kill_9_during_cancellation_then_restart_replays_one_cancellation(
    slurm_lab, tmp_path, tokens, grants
):
    state = tmp_path / "state"
    url, commit, _ = make_repository()
    drv = Driver()
    executor = make_executor(state, tokens, grants)
    try:
        await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "300"])))
        await executor.start(drv.command("start"))
        await observe_until(executor, drv, {"running"})
        cancel = drv.command("cancel", {"reason": "member-request"})
        crashed = run_in_process(state, cancel, "cancelled:compute")
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        await executor.rest.close()
        executor.journal.close()
        executor = make_executor(state, tokens, grants)
        result = await executor.recover(cancel)
        assert (result.outcome, result.message) == ("succeeded", "accepted")
        assert (await executor.cancel(cancel)).to_json() == result.to_json()
        final = await observe_until(executor, drv, TERMINAL)
        assert final.observation["phase"] == "cancelled"
        jobs = one_job_per_stage(drv.attempt_id, ("stage-in", "compute"))
        assert jobs["compute"]["state"].startswith("CANCELLED")
        assert squeue_jobs(f"metallo-{drv.attempt_id}") == []
    finally:
        await executor.rest.close()
