"""Stage script versions and Git LFS on the real Slurm lab (seed 000, Staged Slurm
batch execution: stage-in runs ``git lfs pull``, stage-out pushes LFS objects;
Recovery: every stage is rendered from the Attempt's recorded script version)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from site_runtime.adaptors.slurm.scripts import (
    SCRIPT_VERSION,
    SCRIPTS_BY_VERSION,
    UnknownScriptVersion,
)
from tests.slurm.lab import (
    WORKSPACES,
    Driver,
    git,
    make_repository,
    observe_until,
    payload,
    sacct_jobs,
)

pytestmark = pytest.mark.slurm

TERMINAL = {"succeeded", "failed", "cancelled"}
MODEL = bytes(range(256)) * 64  # 16 KiB of weights


async def run_attempt(executor, url: str, commit: str, command: dict, *, script_version=None):
    drv = Driver()
    prepared = await executor.prepare(drv.command("prepare", payload(url, commit, command)))
    assert prepared.outcome == "succeeded", prepared
    if script_version is not None:
        # An Attempt prepared by the Runtime before an upgrade: its record says so.
        att = executor.journal.attempt(drv.attempt_id)
        executor.journal.update_attempt(
            drv.attempt_id, record={**att.record, "script_version": script_version}
        )
    started = await executor.start(drv.command("start"))
    assert started.outcome == "succeeded", started
    final = await observe_until(executor, drv, TERMINAL)
    return drv, final.observation


async def test_lfs_inputs_reach_compute_and_lfs_outputs_are_pushed(executor):
    # The lab's /etc/gitconfig (Debian's git-lfs) smudges at checkout as well, so this is
    # the round trip; which stage-ins run `git lfs pull` is tested in
    # tests/unit/test_site_runtime_slurm_scripts.py.
    url, commit, bare = make_repository({"README.md": "lab\n"}, lfs={"model.bin": MODEL})
    command = {
        "shell": "sha256sum model.bin | cut -d' ' -f1 > seen.txt; "
        "cp model.bin model-2.bin; echo tuned >> model-2.bin"
    }
    drv, obs = await run_attempt(executor, url, commit, command)
    assert obs["phase"] == "succeeded", obs
    out = obs["output_commit"]
    # compute read the real bytes (stage-in pulled them), not the LFS pointer.
    assert git("-C", str(bare), "show", f"{out}:seen.txt") == hashlib.sha256(MODEL).hexdigest()
    # The new file was committed as an LFS pointer and its object pushed beside the repo.
    pointer = git("-C", str(bare), "show", f"{out}:model-2.bin")
    assert pointer.startswith("version https://git-lfs.github.com/spec/v1"), pointer
    oid = next(line.split(":", 1)[1] for line in pointer.splitlines() if line.startswith("oid"))
    stored = bare / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    assert stored.read_bytes() == MODEL + b"tuned\n"
    requests = executor.journal.stages(drv.attempt_id)
    assert all(r.request["script_version"] == SCRIPT_VERSION == 5 for r in requests.values())


async def test_an_attempt_prepared_with_version_1_runs_version_1_throughout(executor):
    url, commit, bare = make_repository({"README.md": "lab\n"})
    drv, obs = await run_attempt(
        executor, url, commit, {"shell": "echo v1 > out.txt"}, script_version=1
    )
    assert obs["phase"] == "succeeded", obs
    assert git("-C", str(bare), "show", f"{obs['output_commit']}:out.txt") == "v1"
    for stage, row in executor.journal.stages(drv.attempt_id).items():
        assert row.request["script_version"] == 1
        assert row.request["script"] == SCRIPTS_BY_VERSION[1][stage]


async def test_an_attempt_of_an_unknown_script_version_submits_nothing(executor, grants):
    url, commit, _ = make_repository({"README.md": "lab\n"})
    drv = Driver()
    prepared = await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    assert prepared.outcome == "succeeded", prepared
    att = executor.journal.attempt(drv.attempt_id)
    executor.journal.update_attempt(drv.attempt_id, record={**att.record, "script_version": 99})
    with pytest.raises(UnknownScriptVersion, match="version 99"):
        await executor.start(drv.command("start"))
    # No grant issued for a job that cannot be rendered, nothing submitted.
    assert grants.issued == []
    assert {s: r.state for s, r in executor.journal.stages(drv.attempt_id).items()} == {
        "stage-in": "prepared",
        "compute": "prepared",
        "stage-out": "prepared",
    }
    assert sacct_jobs(f"metallo-{drv.attempt_id}") == []


async def test_an_attempt_that_changes_nothing_pushes_nothing(executor):
    url, commit, bare = make_repository({"README.md": "lab\n"})
    drv, obs = await run_attempt(executor, url, commit, ["true"])
    assert obs["phase"] == "succeeded", obs
    assert obs["output_commit"] is None  # as the local executor reports it
    assert git("-C", str(bare), "rev-parse", "refs/heads/main") == commit
    log = (WORKSPACES / f"{drv.attempt_id}.stage-out.log").read_text()
    assert "no changes to commit; nothing pushed" in log


async def test_two_attempts_of_one_branch_at_once_both_push_their_outputs(executor):
    """Without it, of ten Runs of one action on one branch at once, nine would fail
    with repository-push-failed (non-fast-forward) and lose their outputs. Version 3's
    stage-out rebases onto what the other pushed first and pushes again."""
    url, commit, bare = make_repository({"README.md": "lab\n"})
    drivers = [Driver(), Driver()]
    for i, drv in enumerate(drivers):
        command = {"shell": f"echo {i} > out-{i}.txt"}
        prepared = await executor.prepare(drv.command("prepare", payload(url, commit, command)))
        assert prepared.outcome == "succeeded", prepared
    for drv in drivers:
        started = await executor.start(drv.command("start"))
        assert started.outcome == "succeeded", started
    finals = await asyncio.gather(
        *(observe_until(executor, drv, TERMINAL, timeout=240) for drv in drivers)
    )
    observations = [final.observation for final in finals]
    assert [obs["phase"] for obs in observations] == ["succeeded", "succeeded"], observations
    outputs = [obs["output_commit"] for obs in observations]
    head = git("-C", str(bare), "rev-parse", "refs/heads/main")
    # Both outputs are on the branch: the later push is the head, the earlier its parent.
    assert head in outputs
    (earlier,) = set(outputs) - {head}
    assert git("-C", str(bare), "rev-parse", f"{head}^") == earlier
    assert git("-C", str(bare), "rev-parse", f"{earlier}^") == commit
    assert git("-C", str(bare), "ls-tree", "--name-only", head).split() == [
        "README.md",
        "out-0.txt",
        "out-1.txt",
    ]
    logs = [(WORKSPACES / f"{d.attempt_id}.stage-out.log").read_text() for d in drivers]
    assert sum("rebasing onto it" in log for log in logs) == 1, logs
    for drv in drivers:
        for row in executor.journal.stages(drv.attempt_id).values():
            assert row.request["script_version"] == SCRIPT_VERSION
