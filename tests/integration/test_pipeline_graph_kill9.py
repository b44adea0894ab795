"""kill -9 of the Pipeline Coordination process at each point of a diamond, then a restart.

The coordinator runs in its own process (tests/integration/pipeline_coordinator_process.py),
which SIGKILLs itself the n-th time it reaches a point — in the middle of the
parallel branch too (c pinned or launched while b runs). A fresh process takes
the Pipeline over once the dead one's lease (1 s) expires. Whatever the point:
each step is launched once under its one identity, d reads both branches'
pushes, and PipelineCompleted is committed once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from tests.integration.pipeline_coordination_repo import git
from tests.integration.pipeline_coordination_support import ROOT, Harness, build, teardown
from tests.integration.test_pipeline_graphs import DIAMOND

pytestmark = pytest.mark.integration

DIAMOND_ONLY = DIAMOND.split("  cleanup:")[0]


@pytest.fixture
async def h(make_database, amqp_url, topology, tmp_path):
    harness = await build(make_database, amqp_url, topology, tmp_path, actions_yaml=DIAMOND_ONLY)
    procs: list[asyncio.subprocess.Process] = []
    harness.procs = procs  # type: ignore[attr-defined]
    yield harness
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    await teardown(harness)


async def spawn(h: Harness, kill_at: str = "") -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "PC_DATABASE_URL": h.engine.url.render_as_string(hide_password=False),
        "METALLO_AMQP_URL": h.amqp_url,
        "METALLO_TOPOLOGY_PREFIX": h.topology.prefix,
        "PC_KILL_AT": kill_at,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.pipeline_coordinator_process", env=env, cwd=str(ROOT),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    h.procs.append(proc)  # type: ignore[attr-defined]
    return proc


async def play_every_run(h: Harness, pid: str) -> None:
    """Each step's Run, as soon as Execution Core holds it, pushes its file and ends (even
    before the coordinator saved the launch reply: an out-of-order completion)."""
    done: set[int] = set()
    while len(done) < 4:
        for index in range(1, 5):
            run = h.runs.run_for(index, pid)
            if run is not None and index not in done:
                action = run.labels["pipeline_action"]
                pushed = h.repo.push({f"{action}.txt": f"{action}\n"}, action)
                await h.runs.complete(run.run_id, "succeeded", output_commit=pushed)
                done.add(index)
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    "kill_at",
    ["claimed:1", "branch-prepared:1", "settled:2", "pinned:3", "launch-intent:2", "launch-intent:3",
     "launched:2", "launched:3"],
)
async def test_kill_9_at_each_point_then_restart(h, kill_at):
    dying = await spawn(h, kill_at)
    pid = (await h.start_pipeline()).pipeline_id
    player = asyncio.create_task(play_every_run(h, pid))
    try:
        rc = await asyncio.wait_for(dying.wait(), 60)
        assert rc == -signal.SIGKILL, f"the coordinator did not reach {kill_at}"
        await spawn(h)
        p = await h.until_state(pid, "succeeded", "failed")
        await asyncio.wait_for(player, 10)
    finally:
        player.cancel()
    assert p.state == "succeeded", [(s.action, s.state, s.reason_code) for s in p.steps]
    h.runs.assert_one_launch_per_step()
    assert len(h.runs.runs) == 4, "no step got a second Run"
    d = p.step(4)
    for name in ("a.txt", "b.txt", "c.txt"):
        git("--git-dir", h.repo.url, "cat-file", "-e", f"{d.pinned_commit}:{name}")
    for branch in (2, 3):  # each branch started from what a pushed (or later: the player is quick)
        git("--git-dir", h.repo.url, "merge-base", "--is-ancestor", p.step(1).output_commit, p.step(branch).pinned_commit)
    assert len(await h.completed_events(pid)) == 1
