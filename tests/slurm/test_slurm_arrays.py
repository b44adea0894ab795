"""A group of prepared Attempts as three held Slurm arrays on the real lab (ADR 0032).

Checked in what Slurm itself shows (``squeue -r``, ``scontrol``), not only in what
the submission says: one native array job per stage, one task per Attempt,
identity comments, ``aftercorr`` task to task, held until all three exist, then
released; a ``kill -9`` at any point of the submission leaves exactly one array
per stage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from site_runtime.adaptors.slurm.array_cancellation import ArrayChildCancellation
from site_runtime.adaptors.slurm.array_journal import ArrayJournal
from site_runtime.adaptors.slurm.arrays import ArraySubmissions
from site_runtime.domain.slurm_arrays import NotHomogeneous
from tests.slurm.lab import Driver, make_executor, make_repository, payload

pytestmark = pytest.mark.slurm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGE_NAMES = {"stage-in": "-in", "compute": "", "stage-out": "-out"}


def array_tasks(name: str) -> list[dict[str, str]]:
    """Every task slurmctld holds of arrays named ``name`` (``squeue -r``, one line each)."""
    out = subprocess.run(
        ["squeue", "-a", "-r", "-h", "-t", "all", "-n", name, "-o", "%i|%F|%K|%T|%r|%E|%k"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    keys = ("job_id", "array_job_id", "task", "state", "reason", "dependency", "comment")
    return [dict(zip(keys, line.split("|"), strict=True)) for line in out.splitlines()]


def scontrol_show(job_id: str) -> str:
    """``scontrol show job`` of an array (every task's record)."""
    return subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout


def scancel(job_id: str) -> None:
    subprocess.run(["scancel", job_id], check=False, capture_output=True)


async def prepare_three(executor, resources: dict[int, dict] | None = None) -> list[str]:
    url, commit, _ = make_repository()
    attempts = []
    for i in range(3):
        drv = Driver()
        body = payload(url, commit, ["true"], **(resources or {}).get(i, {}))
        body["spec"]["runtime"]["environment"] = {"ITEM": str(i)}
        prepared = await executor.prepare(drv.command("prepare", body))
        assert prepared.outcome == "succeeded", prepared
        attempts.append(drv.attempt_id)
    return attempts


def check_three_arrays(group: str, job_ids: dict[str, str], held: bool) -> None:
    """Slurm holds exactly one array per stage with three tasks, the group's identity
    and ``aftercorr`` on the stage before."""
    for stage, suffix in STAGE_NAMES.items():
        tasks = array_tasks(f"metallo-{group}{suffix}")
        assert {t["array_job_id"] for t in tasks} == {job_ids[stage]}, (stage, tasks)
        assert sorted(int(t["task"]) for t in tasks) == [0, 1, 2], (stage, tasks)
        assert {t["job_id"] for t in tasks} == {f"{job_ids[stage]}_{i}" for i in range(3)}
        assert {t["comment"] for t in tasks} == {f"metallo:{group}:{stage}"}
        if held:
            assert {(t["state"], t["reason"]) for t in tasks} == {("PENDING", "JobHeldUser")}
        else:
            assert all(t["reason"] != "JobHeldUser" for t in tasks), (stage, tasks)
    for stage, before in (("compute", "stage-in"), ("stage-out", "compute")):
        shown = scontrol_show(job_ids[stage])
        assert f"Dependency=aftercorr:{job_ids[before]}_*" in shown, shown


async def test_three_prepared_attempts_become_three_held_arrays_of_three_tasks(executor, tokens):
    attempts = await prepare_three(executor)
    group = f"g-{uuid.uuid4().hex[:10]}"
    steps: list[str] = []
    held_ids: dict[str, str] = {}
    arrays = ArrayJournal(executor.journal)

    def fault(step: str) -> None:
        steps.append(step)
        if step == "held:stage-out":
            # All three exist, none released yet: Slurm shows them held.
            held_ids.update({s: r.job_id for s, r in arrays.stages(group).items()})
            check_three_arrays(group, held_ids, held=True)

    submissions = ArraySubmissions(
        journal=executor.journal, arrays=arrays, rest=executor.rest, fault=fault
    )
    credential = await tokens.member_token(attempts[0])
    try:
        job_ids = await submissions.submit(group, attempts, 2, credential)
        assert job_ids == held_ids
        # every array held before the first release, stage-in released last
        released = [s for s in steps if s.startswith("released:")]
        assert released == ["released:stage-out", "released:compute", "released:stage-in"]
        assert steps.index("held:stage-out") < steps.index("released:stage-out")
        check_three_arrays(group, job_ids, held=False)
        assert "ArrayTaskThrottle=2" in scontrol_show(job_ids["compute"])
        saved = arrays.group(group)
        assert saved is not None and saved.mapping.indices() == {
            a: i for i, a in enumerate(attempts)
        }
        assert {r.state for r in arrays.stages(group).values()} == {"submitted"}
        # Submitting the group again changes nothing in Slurm.
        assert await submissions.submit(group, attempts, 2, credential) == job_ids
        check_three_arrays(group, job_ids, held=False)
    finally:
        for row in arrays.stages(group).values():
            if row.job_id:
                scancel(row.job_id)


async def test_attempts_with_different_resources_are_not_submitted_as_arrays(executor, tokens):
    attempts = await prepare_three(executor, {2: {"cpus": 2}})
    group = f"g-{uuid.uuid4().hex[:10]}"
    arrays = ArrayJournal(executor.journal)
    submissions = ArraySubmissions(journal=executor.journal, arrays=arrays, rest=executor.rest)
    with pytest.raises(NotHomogeneous) as raised:
        await submissions.submit(group, attempts, None, await tokens.member_token(attempts[0]))
    assert raised.value.reason.startswith(f"compute.cpus differs: {attempts[2]} has 2")
    assert arrays.group(group) is None
    for suffix in STAGE_NAMES.values():
        assert array_tasks(f"metallo-{group}{suffix}") == []


def run_submission(state, group, attempts, fault=None) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable,
        "-m",
        "tests.slurm.array_runner",
        str(state),
        group,
        json.dumps(attempts),
        "2",
    ]
    if fault:
        args.append(fault)
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    "fault",
    [
        "intent:stage-in",
        "posted:compute",
        "held:stage-out",
        "released:stage-out",
        "released:compute",
    ],
)
async def test_kill_9_during_the_submission_leaves_exactly_one_array_per_stage(
    slurm_lab, tmp_path, tokens, grants, fault
):
    state = tmp_path / "state"
    executor = make_executor(state, tokens, grants)
    group = f"g-{uuid.uuid4().hex[:10]}"
    try:
        attempts = await prepare_three(executor)
        await executor.rest.close()
        executor.journal.close()
        killed = run_submission(state, group, attempts, fault)
        assert killed.returncode == -9, killed.stderr
        done = run_submission(state, group, attempts)
        assert done.returncode == 0, done.stderr
        job_ids = json.loads(done.stdout.strip().splitlines()[-1])
        assert set(job_ids) == set(STAGE_NAMES), job_ids
        check_three_arrays(group, job_ids, held=False)
    finally:
        for suffix in STAGE_NAMES.values():
            for task in array_tasks(f"metallo-{group}{suffix}"):
                scancel(task["array_job_id"])


class StopBeforeRelease(Exception):
    """Ends the submission once all three arrays are held (none released)."""


async def test_cancelling_one_child_cancels_its_task_in_every_array_and_no_sibling(
    executor, tokens
):
    attempts = await prepare_three(executor)
    group = f"g-{uuid.uuid4().hex[:10]}"
    arrays = ArrayJournal(executor.journal)

    def stop(step: str) -> None:
        if step == "held:stage-out":
            raise StopBeforeRelease()

    submissions = ArraySubmissions(
        journal=executor.journal, arrays=arrays, rest=executor.rest, fault=stop
    )
    credential = await tokens.member_token(attempts[0])
    with pytest.raises(StopBeforeRelease):
        await submissions.submit(group, attempts, None, credential)
    job_ids = {s: r.job_id for s, r in arrays.stages(group).items()}
    try:
        cancellation = ArrayChildCancellation(arrays=arrays, rest=executor.rest)
        results = await cancellation.cancel_child(group, attempts[1], "alice", credential)
        assert results == {f"{job_ids[s]}_1": "accepted" for s in STAGE_NAMES}
        for stage, suffix in STAGE_NAMES.items():
            states = {int(t["task"]): t["state"] for t in array_tasks(f"metallo-{group}{suffix}")}
            # A task cancelled while its array is pending and unsplit leaves no record of
            # its own (nor in accounting): slurmctld drops it from the array's task set.
            assert states == {0: "PENDING", 2: "PENDING"}, (stage, states)
            assert "ArrayTaskId=0,2 " in scontrol_show(job_ids[stage])
        # A task that is already gone is reported so, not guessed.
        again = await cancellation.cancel_child(group, attempts[1], "alice", credential)
        assert set(again.values()) <= {"not-found", "already-terminal"}, again
    finally:
        for job_id in job_ids.values():
            if job_id:
                scancel(job_id)
