"""The ``start-array`` Site command on the real Slurm lab (ADR 0032; docs/site-commands.md).

A group of prepared children becomes exactly three native arrays; every task does its
own child's work (its commit, its ``METALLO_PARAM_*`` value, its repository grant, its
workspace, its own pushed commit); each child is observed, read and cancelled on its
own through its ``JOBID_TASK`` ids.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import uuid

import pytest

from site_runtime.domain.slurm_stages import STAGES
from tests.slurm.lab import (
    WORKSPACES,
    Driver,
    git,
    make_executor,
    make_repository,
    observe_until,
    payload,
)
from tests.slurm.test_slurm_arrays import (
    ROOT,
    STAGE_NAMES,
    array_tasks,
    check_three_arrays,
    scancel,
)

pytestmark = pytest.mark.slurm
TERMINAL = {"succeeded", "failed", "cancelled"}
# Each child writes its own item's file; item 7's compute exits 3.
COMMAND = {
    "shell": 'if [ "$METALLO_PARAM_ITEM" = 7 ]; then exit 3; fi; '
    'printf "%s %s\\n" "$METALLO_PARAM_ITEM" "$(id -un)" > "out-$METALLO_PARAM_ITEM.txt"; '
    "sleep ${SLEEP:-0}"
}


class Permits:
    """Read permits that grant every read (the edge's permit rules are tested there)."""

    async def authorise_execution(self, request):
        return {"authorised": True}

    async def authorise_read(self, request):
        return {"permit_id": "rp-1", **request}

    async def check_read_permit(self, permit_id):
        return {"permit_id": permit_id}


async def prepare_children(executor, count: int, sleep: int = 0, **resources):
    """``count`` prepared children of one repository, item ``i`` pushing to ``out-i``."""
    url, commit, bare = make_repository({"README.md": "lab\n"})
    drivers = []
    for i in range(count):
        drv = Driver()
        body = payload(url, commit, COMMAND, **(resources if i == count - 1 else {}))
        body["spec"]["parameters"] = {"item": str(i)}
        body["spec"]["runtime"]["environment"] = {"SLEEP": str(sleep)}
        body["repository"]["output_branch"] = f"out-{i}"
        prepared = await executor.prepare(drv.command("prepare", body))
        assert prepared.outcome == "succeeded", prepared
        drivers.append(drv)
    return drivers, commit, bare


def start_array(drivers, group: str, max_active: int = 0, command_id: str | None = None):
    tasks = [
        {"index": i, "run_id": d.run_id, "attempt_id": d.attempt_id, "attempt_number": 1}
        for i, d in enumerate(drivers)
    ]
    body = {"array": {"group_id": group, "max_active": max_active, "tasks": tasks}}
    return drivers[0].command("start-array", body, command_id=command_id)


def cleanup(group: str) -> None:
    for suffix in STAGE_NAMES.values():
        for task in array_tasks(f"metallo-{group}{suffix}"):
            scancel(task["array_job_id"])


async def test_ten_children_are_three_arrays_and_each_child_ends_with_its_own_outputs(
    executor, grants, tokens
):
    drivers, commit, bare = await prepare_children(executor, 10)
    group = str(uuid.uuid4())
    try:
        command = start_array(drivers, group, max_active=4)
        started = await executor.start_array(command)
        assert started.outcome == "succeeded", started
        obs = started.observation
        assert obs["phase"] == "queued"
        ids = {j["stage"]: j["job_id"].split("_")[0] for j in started.native_jobs}
        assert started.native_jobs == [{"stage": s, "job_id": f"{ids[s]}_0"} for s in STAGES]
        assert obs["array_tasks"] == [
            {
                "index": i,
                "attempt_id": d.attempt_id,
                "native_jobs": [{"stage": s, "job_id": f"{ids[s]}_{i}"} for s in STAGES],
            }
            for i, d in enumerate(drivers)
        ]
        # Exactly three native array jobs, ten tasks each (every record Slurm holds).
        for stage, suffix in STAGE_NAMES.items():
            tasks = array_tasks(f"metallo-{group}{suffix}")
            assert {t["array_job_id"] for t in tasks} == {ids[stage]}, tasks
        # Redelivered, and sent again under another id: the same answer, no new array.
        assert (await executor.start_array(command)).to_json() == started.to_json()
        again = await executor.start_array(start_array(drivers, group, max_active=4))
        assert again.observation["array_tasks"] == obs["array_tasks"]
        plain = await executor.start(drivers[5].command("start"))
        assert plain.outcome == "succeeded"
        assert plain.native_jobs == obs["array_tasks"][5]["native_jobs"]

        finals = [await observe_until(executor, d, TERMINAL, timeout=240) for d in drivers]
        for stage, suffix in STAGE_NAMES.items():
            seen = {t["array_job_id"] for t in array_tasks(f"metallo-{group}{suffix}")}
            assert seen <= {ids[stage]}, (stage, seen)
        for i, final in enumerate(finals):
            o = final.observation
            assert final.native_jobs == obs["array_tasks"][i]["native_jobs"]
            if i == 7:
                # Only item 7's compute exited 3: only its child failed, with its facts.
                assert o["phase"] == "failed", o
                assert o["failure"]["stage"] == "compute" and o["exit_code"] == 3, o
                assert o["output_commit"] is None
                continue
            assert o["phase"] == "succeeded", (i, o)
            assert o["exit_code"] == 0
            pushed = o["output_commit"]
            assert git("-C", str(bare), "rev-parse", f"refs/heads/out-{i}") == pushed
            assert git("-C", str(bare), "show", f"{pushed}:out-{i}.txt") == f"{i} alice"
            assert git("-C", str(bare), "rev-parse", f"{pushed}^") == commit
            assert git("-C", str(bare), "ls-tree", "--name-only", pushed).split() == [
                "README.md",
                f"out-{i}.txt",
            ]
            assert not (WORKSPACES / drivers[i].attempt_id).exists()
        # The failed child's stage-out task never ran (its aftercorr can never be met).
        out_log = WORKSPACES / f"metallo-{group}.stage-out.7.log"
        assert not out_log.exists() or "metallo-output-commit" not in out_log.read_text()

        # Nothing of the group is left waiting: slurmctld ended the failed child's
        # stage-out task (its aftercorr predecessor failed), not left it pending.
        for suffix in STAGE_NAMES.values():
            states = {t["state"] for t in array_tasks(f"metallo-{group}{suffix}")}
            assert "PENDING" not in states, (suffix, states)

        # Each child's log is its own task's.
        executor.authority = Permits()
        body = {"stage": "compute", "max_bytes": 100000, "viewer": "m-alice"}
        read = await executor.read_log(drivers[3].command("read-log", body))
        assert read.outcome == "succeeded", read
        text = read.observation["log"]["text"]
        assert text == (WORKSPACES / f"metallo-{group}.compute.3.log").read_text()
        assert "exit status 0" in text

        # Two grants per child (stage-in, stage-out), each released; no token on disk.
        assert len(grants.issued) == 20
        assert sorted(grants.released) == sorted(g.grant_id for g in grants.issued)
        assert not (WORKSPACES / f"metallo-{group}.material").exists()
        journal = b"".join(
            p.read_bytes()
            for p in executor.journal.path.parent.iterdir()
            if p.name.startswith("jobs.sqlite")
        )
        for secret in [*tokens.issued, *(g.token for g in grants.issued)]:
            assert secret.encode() not in journal
    finally:
        cleanup(group)


async def test_cancelling_one_child_leaves_its_siblings_results(executor):
    drivers, _commit, bare = await prepare_children(executor, 3, sleep=8)
    group = str(uuid.uuid4())
    try:
        started = await executor.start_array(start_array(drivers, group))
        assert started.outcome == "succeeded", started
        await observe_until(executor, drivers[1], {"running"}, timeout=120)
        cancelled = await executor.cancel(drivers[1].command("cancel"))
        assert (cancelled.outcome, cancelled.message) == ("succeeded", "accepted"), cancelled
        final = await observe_until(executor, drivers[1], TERMINAL)
        assert final.observation["phase"] == "cancelled", final
        for i in (0, 2):
            sibling = await observe_until(executor, drivers[i], TERMINAL, timeout=180)
            assert sibling.observation["phase"] == "succeeded", sibling
            pushed = sibling.observation["output_commit"]
            assert git("-C", str(bare), "show", f"{pushed}:out-{i}.txt") == f"{i} alice"
        assert git("-C", str(bare), "branch", "--list", "out-1") == ""
    finally:
        cleanup(group)


async def test_children_with_different_resources_are_refused_with_the_field(executor):
    drivers, _commit, _bare = await prepare_children(executor, 3, cpus=2)
    group = str(uuid.uuid4())
    refused = await executor.start_array(start_array(drivers, group))
    assert (refused.outcome, refused.code) == ("refused", "array-not-homogeneous")
    assert refused.message.startswith("compute.cpus differs"), refused.message
    for suffix in STAGE_NAMES.values():
        assert array_tasks(f"metallo-{group}{suffix}") == []
    # Refused, the children start one by one.
    plain = await executor.start(drivers[0].command("start"))
    assert plain.outcome == "succeeded" and plain.native_jobs[0]["job_id"].isdigit()
    await executor.cancel(drivers[0].command("cancel"))


async def test_a_malformed_start_array_is_refused_invalid_request(executor):
    drivers, _commit, _bare = await prepare_children(executor, 2)
    command = start_array(drivers, str(uuid.uuid4()))
    command.payload["array"]["tasks"][1]["index"] = 0
    refused = await executor.start_array(command)
    assert (refused.outcome, refused.code) == ("refused", "invalid-request")
    assert "index 0 is named twice" in refused.message


def run_command(state, command, fault=None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "tests.slurm.array_command_runner", str(state)]
    args.append(json.dumps(dataclasses.asdict(command)))
    if fault:
        args.append(fault)
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("fault", ["intent:compute", "held:stage-out", "released:compute"])
async def test_kill_9_during_start_array_leaves_one_array_per_stage_and_the_same_answer(
    slurm_lab, tmp_path, tokens, grants, fault
):
    state = tmp_path / "state"
    executor = make_executor(state, tokens, grants)
    drivers, _commit, _bare = await prepare_children(executor, 3)
    await executor.close()
    group = str(uuid.uuid4())
    command = start_array(drivers, group, max_active=2)
    try:
        killed = run_command(state, command, fault)
        assert killed.returncode == -9, killed.stderr
        done = run_command(state, command)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["outcome"] == "succeeded", result
        ids = {j["stage"]: j["job_id"].split("_")[0] for j in result["native_jobs"]}
        check_three_arrays(group, ids, held=False)
        tasks = result["observation"]["array_tasks"]
        assert [t["attempt_id"] for t in tasks] == [d.attempt_id for d in drivers]
        # Redelivered once more: the saved answer, nothing new in Slurm.
        again = json.loads(run_command(state, command).stdout.strip().splitlines()[-1])
        assert again == result
        check_three_arrays(group, ids, held=False)
    finally:
        cleanup(group)
