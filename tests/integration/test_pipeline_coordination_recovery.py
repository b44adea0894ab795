"""The coordinator killed at each point and restarted (seed 004 §8B, §8C recovery).

A fault hook raises CoordinatorCrash at a named point, which leaves exactly the
durable state a killed process leaves; a fresh coordinator takes the Pipeline
over once the dead one's lease expires (1 s here). Whatever the point, every
step is launched once, under its one stable identity, and the hand-off holds.
"""

from __future__ import annotations

import pytest

from pipeline_coordination.application.faults import CoordinatorCrash
from pipeline_coordination.domain import identities
from tests.integration.pipeline_coordination_support import Harness, build, teardown


class CrashOnce:
    """A fault hook that kills the coordinator the first time it reaches ``point``."""

    def __init__(self, point: str):
        self.point = point
        self.fired = False

    async def __call__(self, point: str) -> None:
        if point == self.point and not self.fired:
            self.fired = True
            raise CoordinatorCrash(point)


@pytest.fixture
async def h(make_database, amqp_url, topology, tmp_path):
    harness = await build(make_database, amqp_url, topology, tmp_path)
    yield harness
    await teardown(harness)


async def crash_then_restart(h: Harness, crash: CrashOnce, pid_holder: list[str]) -> None:
    dead = h.coordinator(fault=crash)
    await dead.start()
    pid_holder.append((await h.start_pipeline()).pipeline_id)
    await h.until(lambda: crash.fired and dead.coordinator.task is not None and dead.coordinator.task.done())


async def run_to_success(h: Harness, pid: str) -> None:
    """Play both steps: step 1 pushes, then each completes; check the hand-off."""
    p = await h.until_step(pid, 1, "launched", "succeeded")
    run1 = h.runs.run_for(1)
    if p.step(1).state == "launched":
        pushed = h.repo.push({"model.bin": "weights\n"}, "trained")
        await h.runs.complete(run1.run_id, "succeeded", output_commit=pushed)
    else:
        pushed = run1.output_commit
    p = await h.until_step(pid, 2, "launched")
    assert h.runs.launch_for(2).repository_commit == pushed == p.step(2).pinned_commit
    await h.runs.complete(h.runs.run_for(2).run_id, "succeeded")
    p = await h.until_state(pid, "succeeded")
    for s in p.steps:
        run = h.runs.run_for(s.index)
        assert s.run_id == run.run_id
        assert run.launch_command_id == identities.command_id(pid, "launch", s.index, 1)
    h.runs.assert_one_launch_per_step()
    assert len(h.runs.launches) == 2, "no step was launched twice"
    assert len(await h.completed_events(pid)) == 1


@pytest.mark.parametrize("point", ["claimed", "branch-prepared", "pinned", "launch-intent", "launched", "settled"])
async def test_killed_at_each_point_and_restarted(h, point):
    crash, pids = CrashOnce(point), []
    await crash_then_restart(h, crash, pids)
    await h.coordinator().start()
    await run_to_success(h, pids[0])


async def test_completion_that_overtakes_the_lost_launch_reply(h):
    """Killed after LaunchRun answered: the Run ends before anyone saved its id."""
    crash, pids = CrashOnce("launched"), []
    await crash_then_restart(h, crash, pids)
    pid = pids[0]
    pushed = h.repo.push({"model.bin": "weights\n"}, "trained")
    await h.runs.complete(h.runs.run_for(1).run_id, "succeeded", output_commit=pushed)

    async def recorded() -> bool:
        return (await h.load(pid)).step(1).run_outcome == "succeeded"

    await h.until(recorded)  # the event alone records the Run and its end on the step
    p = await h.load(pid)
    assert p.step(1).run_id == h.runs.run_for(1).run_id and p.step(1).output_commit == pushed
    await h.coordinator().start()
    await run_to_success(h, pid)


async def test_stop_while_dead_after_launch_intent_launches_once_then_cancels(h):
    """Intent saved, LaunchRun maybe sent, then a stop: the same launch is resolved and its Run cancelled."""
    crash, pids = CrashOnce("launch-intent"), []
    await crash_then_restart(h, crash, pids)
    pid = pids[0]
    assert (await h.load(pid)).step(1).state == "launching"
    assert (await h.stop_pipeline(pid)).stop_recorded
    await h.coordinator().start()
    p = await h.until_state(pid, "stopped")
    assert p.step(1).state == "cancelled" and p.step(2).state == "skipped"
    h.runs.assert_one_launch_per_step()
    assert [c.run_id for c in h.runs.cancels] == [h.runs.run_for(1).run_id]
    assert h.runs.launch_for(2) is None


async def test_killed_after_cancel_answered_resends_the_same_cancel(h):
    h.runs.cancel_ends_run = False  # the Run keeps going until the test ends it
    crash = CrashOnce("cancelled")
    first = h.coordinator(fault=crash)
    await first.start()
    pid = (await h.start_pipeline()).pipeline_id
    await h.until_step(pid, 1, "launched")
    await h.stop_pipeline(pid)
    await h.until(lambda: crash.fired and first.coordinator.task.done())
    await h.coordinator().start()
    await h.until_step(pid, 1, "cancelling")
    assert len({c.metadata.command_id for c in h.runs.cancels}) == 1
    assert h.runs.cancels[0].metadata.command_id == identities.command_id(pid, "cancel", 1, 1)
    await h.runs.complete(h.runs.run_for(1).run_id, "cancelled", reason="cancelled-by-member")
    p = await h.until_state(pid, "stopped")
    assert p.step(1).state == "cancelled"


async def test_two_coordinators_share_pipelines_without_launching_twice(h):
    """Coordinators race for the same rows; leases and SKIP LOCKED give each Pipeline to one at a time."""
    for _ in range(2):
        await h.coordinator().start()
    pids = [(await h.start_pipeline(actions=("train", "eval"))).pipeline_id for _ in range(3)]
    for step in (1, 2):
        for pid in pids:
            await h.until_step(pid, step, "launched")
            await h.runs.complete(h.runs.run_for(step, pid).run_id, "succeeded")
    for pid in pids:
        await h.until_state(pid, "succeeded")
        assert len(await h.completed_events(pid)) == 1
    h.runs.assert_one_launch_per_step()
    assert len(h.runs.launches) == 6
