"""A compute job really preempted on the Slurm lab (docs/site-runtime.md,
Reconciliation): the lab's `preemptible` partition (PreemptMode=REQUEUE) is preempted
by jobs of its `urgent` partition (a higher PriorityTier, preempt/partition_prio).
Metallo's jobs may not be requeued, so slurmctld cancels it PREEMPTED; once it has left
the queue the requeue-visibility deadline (shortened here) runs, and only past it the
Attempt fails ``preempted``. Run under ``flock /tmp/metallo-slurm.lock``."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time

import pytest

from site_runtime.application.ports import Deferred
from tests.slurm.lab import Driver, make_executor, make_repository, observe_until, payload

pytestmark = pytest.mark.slurm

REQUEUE_DEADLINE = 4


def _node_cpus() -> int:
    out = subprocess.run(
        ["scontrol", "-o", "show", "node"], capture_output=True, text=True, check=True
    ).stdout
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    return int(fields["CPUTot"])


def _submit_urgent(cpus: int) -> str:
    """A job of the higher-tier partition that needs every CPU of the node."""
    return (
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                "-p",
                "urgent",
                "-c",
                str(cpus),
                "--mem=64",
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 3",
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd="/tmp",
        )
        .stdout.strip()
        .split(";")[0]
    )


def _accounted_states(job_id: str) -> list[str]:
    out = subprocess.run(
        ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "state"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


async def _start(executor, drv) -> None:
    """Send ``start`` as the worker does: again while a busy slurmrestd defers it."""
    end = time.monotonic() + 60
    while True:
        try:
            await executor.start(drv.command("start"))
            return
        except Deferred:
            assert time.monotonic() < end, "start was deferred for a minute"
            await asyncio.sleep(1)


def _cancel(*job_ids: str) -> None:
    subprocess.run(["scancel", *job_ids], check=False, cwd="/tmp")


async def test_a_preempted_compute_job_fails_preempted_after_the_requeue_deadline(
    slurm_lab, tmp_path, tokens, grants
):
    executor = make_executor(
        tmp_path / "state",
        tokens,
        grants,
        env={"SLURM_PARTITION": "preemptible", "SLURM_REQUEUE_DEADLINE_SECONDS": REQUEUE_DEADLINE},
    )
    urgent = None
    compute = None
    try:
        url, commit, _ = make_repository()
        drv = Driver()
        await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "120"])))
        await _start(executor, drv)
        await observe_until(executor, drv, {"running"})
        compute = executor.journal.stages(drv.attempt_id)["compute"].job_id
        assert compute
        end = time.monotonic() + 30
        while executor.journal.stages(drv.attempt_id)["compute"].native["state"] != "RUNNING":
            assert time.monotonic() < end, "compute never ran"
            await asyncio.sleep(0.5)
            executor.rest.forget_list()
            with contextlib.suppress(Deferred):
                await executor.observe(drv.command("observe"))

        urgent = _submit_urgent(_node_cpus())
        # Observe until the end, recording the compute stage's saved facts on the way.
        seen: list[dict] = []
        final = None
        end = time.monotonic() + 120
        while time.monotonic() < end:
            executor.rest.forget_list()
            try:
                result = await executor.observe(drv.command("observe"))
            except Deferred:
                result = None
            seen.append(dict(executor.journal.stages(drv.attempt_id)["compute"].native or {}))
            if result and result.observation["phase"] in ("succeeded", "failed", "cancelled"):
                final = result
                break
            await asyncio.sleep(0.5)
        assert final is not None, seen[-3:]

        obs = final.observation
        assert obs["phase"] == "failed", obs
        assert (obs["failure"]["code"], obs["failure"]["stage"]) == ("preempted", "compute")
        assert obs["failure"]["job_id"] == compute
        # PREEMPTED was seen while still open: in the queue, then out of it with the
        # requeue-visibility deadline running; terminal only once it had passed.
        waiting = [f for f in seen if f.get("state") == "PREEMPTED" and not f.get("terminal")]
        assert any(f.get("requeue_deadline") for f in waiting), seen
        last = seen[-1]
        assert last["terminal"] and last["state"] == "PREEMPTED"
        deadline = last["requeue_deadline"]
        assert all(
            f.get("requeue_deadline") == deadline for f in waiting if f.get("requeue_deadline")
        )
        # Slurm did not run it again: one accounting record, PREEMPTED.
        assert _accounted_states(compute) == ["PREEMPTED"]
        assert executor.journal.stages(drv.attempt_id)["stage-out"].job_id is None
    finally:
        _cancel(*(j for j in (urgent, compute) if j))
        try:
            await executor.cancel(drv.command("cancel", {"reason": "test"}))
        except Deferred:
            pass
        await executor.rest.close()
        executor.journal.close()
