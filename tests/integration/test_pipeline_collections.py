"""Collections through Pipeline Coordination's real parts (PostgreSQL, RabbitMQ, git).

A 20-child matrix with maxActive 3 never has more than three child Runs alive
and each child's LaunchRun carries only its own values; fail-fast cancels the
siblings still running and never launches the rest; CancelCollection cancels a
whole collection; a collection is one step of its Pipeline (the next step starts
once every child succeeded); GetCollection / ListCollections and the
CollectionCompleted event show each child and the counts.
"""

from __future__ import annotations

import uuid

import pytest

from metallo.common.v1 import common_pb2
from metallo.messaging import Rejected
from metallo.messaging.schema import TABLES
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from tests.integration.pipeline_coordination_support import Harness, build, teardown

pytestmark = pytest.mark.integration

ACTIONS = """\
version: 1
actions:
  sweep:
    type: slurm-job
    command: [python, train.py]
    matrix:
      lr: ["0.1", "0.01", "0.001", "0.0001"]
      seed: ["1", "2", "3", "4", "5"]
    maxActive: 3
    array: never
  fragile:
    type: slurm-job
    command: [python, fragile.py]
    parameters:
      - {case: "a"}
      - {case: "b"}
      - {case: "c"}
      - {case: "d"}
      - {case: "e"}
    maxActive: 2
    failFast: true
    array: never
  grid:
    type: slurm-job
    command: [python, grid.py]
    matrix:
      seed: ["1", "2", "3", "4", "5", "6"]
    maxActive: 2
    array: prefer
  report:
    type: slurm-job
    command: [python, report.py]
    needs: [sweep]
"""


@pytest.fixture
async def h(make_database, amqp_url, topology, tmp_path):
    harness = await build(make_database, amqp_url, topology, tmp_path, actions_yaml=ACTIONS)
    await harness.coordinator().start()
    yield harness
    await teardown(harness)


def query(**fields) -> common_pb2.QueryMetadata:
    return common_pb2.QueryMetadata(acting_member=fields.get("member", "m-alice"), project="demo")


async def get_collection(h: Harness, collection_id: str) -> pb.Collection:
    return await h.client.request(pb.GetCollection(metadata=query(), collection_id=collection_id))


def alive(h: Harness) -> list:
    """Child Runs launched and not ended (RunsDouble's view, as Execution Core's)."""
    return [r for r in h.runs.runs.values() if r.labels.get("collection_item") and not r.outcome]


async def collection_of(h: Harness, pid: str, index: int) -> str:
    p = await h.until_step(pid, index, "launched")
    return p.step(index).collection_id


async def test_twenty_children_run_three_at_a_time_each_with_its_own_values_then_the_next_step(h):
    pid = (await h.start_pipeline(actions=("sweep", "report"))).pipeline_id
    cid = await collection_of(h, pid, 1)
    most = 0
    ended = 0
    while ended < 20:
        await h.until(lambda n=ended: len(alive(h)) >= min(3, 20 - n))
        running = alive(h)
        most = max(most, len(running))
        assert len(running) <= 3, f"{len(running)} children alive at once"
        await h.runs.complete(running[0].run_id, "succeeded")
        ended += 1
        await h.until(lambda n=ended: len(alive(h)) <= 2 or n + len(alive(h)) >= 20)
    assert most == 3
    p = await h.until_step(pid, 2, "launched")  # report starts after every child succeeded
    assert p.step(1).state == "succeeded"

    children = [c for c in h.runs.launches if c.labels.get("collection_id") == cid]
    by_key = {c.launch_key: dict(c.parameters) for c in children}
    assert len(by_key) == 20
    values = sorted((v["lr"], v["seed"]) for v in by_key.values())
    assert values == sorted((lr, s) for lr in ("0.1", "0.01", "0.001", "0.0001") for s in "12345")
    assert all(c.repository_commit == p.step(1).pinned_commit and c.revision == p.step(1).revision
               for c in children)
    h.runs.assert_one_launch_per_step()

    got = await get_collection(h, cid)
    assert got.state == "succeeded" and got.counts.total == 20 and got.counts.succeeded == 20
    assert got.max_active == 3 and [i.index for i in got.items] == list(range(1, 21))
    assert got.items[6].parameters == {"lr": "0.01", "seed": "2"} and got.items[6].run_id
    listed = await h.client.request(pb.ListCollections(metadata=query(), pipeline_id=pid))
    assert [c.collection_id for c in listed.collections] == [cid] and not listed.collections[0].items
    assert listed.collections[0].counts.succeeded == 20

    shown = await h.get(pid)
    assert shown.steps[0].collection_id == cid and shown.steps[0].collection_counts.total == 20
    events = await outbox_events(h, pb.CollectionCompleted)
    assert [(e.collection_id, e.outcome, e.counts.succeeded) for e in events] == [(cid, "succeeded", 20)]


async def outbox_events(h: Harness, kind):
    from sqlalchemy import select

    messages = TABLES["outbox_messages"]
    async with h.engine.connect() as conn:
        rows = await conn.execute(select(messages.c.body).where(messages.c.type == kind.DESCRIPTOR.full_name))
        return [kind.FromString(r.body) for r in rows]


async def test_fail_fast_cancels_the_running_sibling_and_never_launches_the_rest(h):
    h.runs.cancel_ends_run = True
    pid = (await h.start_pipeline(actions=("fragile",))).pipeline_id
    cid = await collection_of(h, pid, 1)
    await h.until(lambda: len(alive(h)) == 2)
    first, second = sorted(alive(h), key=lambda r: int(r.labels["collection_item"]))
    await h.runs.complete(first.run_id, "failed", "exit-nonzero")
    p = await h.until_state(pid, "failed")
    got = await get_collection(h, cid)
    states = [i.state for i in got.items]
    assert states == ["failed", "cancelled", "cancelled", "cancelled", "cancelled"], states
    assert [c.run_id for c in h.runs.cancels] == [second.run_id]
    assert {i.reason_code for i in got.items[2:]} == {"fail-fast"} and not any(i.run_id for i in got.items[2:])
    assert got.counts.failed == 1 and got.counts.cancelled == 4
    assert p.step(1).reason_code == "collection-failed"
    launched = {c.launch_key for c in h.runs.launches if c.labels.get("collection_id") == cid}
    assert len(launched) == 2


async def test_cancelling_a_collection_cancels_live_children_and_keeps_ended_ones(h):
    h.runs.cancel_ends_run = True
    pid = (await h.start_pipeline(actions=("sweep",))).pipeline_id
    cid = await collection_of(h, pid, 1)
    await h.until(lambda: len(alive(h)) == 3)
    done = alive(h)[0]
    await h.runs.complete(done.run_id, "succeeded")
    await h.until(lambda: len(alive(h)) == 3)
    reply = await h.client.request(pb.CancelCollection(
        metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member="m-alice", project="demo"),
        collection_id=cid, reason="wrong data"))
    assert reply.cancel_recorded
    p = await h.until_state(pid, "failed")
    got = await get_collection(h, cid)
    assert got.state == "cancelled" and got.cancelled_by == "m-alice" and got.cancel_reason == "wrong data"
    assert got.counts.succeeded == 1 and got.counts.cancelled == 19 and got.counts.active == 0
    assert sorted(c.run_id for c in h.runs.cancels) == sorted(r.run_id for r in h.runs.runs.values()
                                                              if r.outcome == "cancelled")
    assert len(h.runs.cancels) == 3 and p.step(1).state == "cancelled"
    again = await h.client.request(pb.CancelCollection(
        metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member="m-alice", project="demo"),
        collection_id=cid, reason="again"))
    assert not again.cancel_recorded


async def test_collection_queries_refuse_bad_ids_and_other_projects(h):
    with pytest.raises(Rejected) as e:
        await get_collection(h, "not-an-id")
    assert e.value.code == "invalid-argument"
    with pytest.raises(Rejected) as e:
        await get_collection(h, str(uuid.uuid4()))
    assert e.value.code == "not-found"


class CrashOnce:
    """A fault hook that kills the coordinator the first time it reaches ``point``."""

    def __init__(self, point: str):
        self.point = point
        self.fired = False

    async def __call__(self, point: str) -> None:
        if point == self.point and not self.fired:
            self.fired = True
            from pipeline_coordination.application.faults import CoordinatorCrash

            raise CoordinatorCrash(point)


@pytest.fixture
async def bare(make_database, amqp_url, topology, tmp_path):
    harness = await build(make_database, amqp_url, topology, tmp_path, actions_yaml=ACTIONS)
    yield harness
    await teardown(harness)


@pytest.mark.parametrize("point", ["item-launch-intent", "item-launched"])
async def test_a_coordinator_killed_while_launching_children_launches_each_once(bare, point):
    h = bare
    crash = CrashOnce(point)
    dead = h.coordinator(fault=crash)
    await dead.start()
    pid = (await h.start_pipeline(actions=("fragile",))).pipeline_id
    await h.until(lambda: crash.fired and dead.coordinator.task is not None and dead.coordinator.task.done())
    await h.coordinator().start()
    for _ in range(5):
        await h.until(lambda: len(alive(h)) >= 1)
        await h.runs.complete(alive(h)[0].run_id, "succeeded")
    p = await h.until_state(pid, "succeeded")
    h.runs.assert_one_launch_per_step()
    keys = [c.launch_key for c in h.runs.launches]
    assert len(set(keys)) == 5 and len(h.runs.runs) == 5
    assert all(i.run_id and i.state == "succeeded" for i in p.step(1).items)


async def test_a_slurm_array_collection_launches_every_child_at_once_in_one_group(h):
    """``array: prefer`` on Slurm: all six children are launched together, each naming the
    one group, its own index and the collection's maxActive; a fallback Execution Core
    reports on a child's Run reaches the collection's array decision."""
    pid = (await h.start_pipeline(actions=("grid",))).pipeline_id
    cid = await collection_of(h, pid, 1)
    await h.until(lambda: len(alive(h)) == 6)
    launches = [c for c in h.runs.launches if c.labels.get("collection_id") == cid]
    groups = {(c.array_group.group_id, c.array_group.size, c.array_group.max_active, c.array_group.mode)
              for c in launches}
    assert len(groups) == 1 and next(iter(groups))[1:] == (6, 2, "prefer")
    assert sorted(c.array_group.index for c in launches) == list(range(6))
    by_item = {int(c.labels["collection_item"]): c.array_group.index for c in launches}
    assert all(index == item - 1 for item, index in by_item.items())
    assert (await get_collection(h, cid)).array_decision.startswith("array: prefer")
    why = "individual: start-array refused: array-not-homogeneous: compute.cpus differs"
    for run in sorted(alive(h), key=lambda r: int(r.labels["collection_item"])):
        run.array_start = why
        await h.runs.complete(run.run_id, "succeeded")
    await h.until_state(pid, "succeeded")
    got = await get_collection(h, cid)
    assert got.array_decision == f"array: prefer: one Slurm array per stage (maxActive 2); then {why}"
