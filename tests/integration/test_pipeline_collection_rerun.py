"""``rerun --failed`` of a collection through Pipeline Coordination's real parts (PostgreSQL, RabbitMQ, git).

A collection whose children partly failed is rerun: only the children that did
not succeed (failed, lost) are launched again — at the commit the branch names
when the rerun's step starts — while the succeeded ones are carried over with
their Runs (never relaunched), saved as such and shown as such by GetCollection
and GetPipeline; the step after the collection then runs.
"""

from __future__ import annotations

import pytest

from metallo.common.v1 import common_pb2
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from tests.integration.pipeline_coordination_support import Harness, build, teardown

pytestmark = pytest.mark.integration

ACTIONS = """\
version: 1
actions:
  cases:
    type: slurm-job
    command: [python, evaluate.py]
    parameters:
      - {case: "a"}
      - {case: "b"}
      - {case: "c"}
      - {case: "d"}
    maxActive: 4
    array: never
  report:
    type: slurm-job
    command: [python, report.py]
    needs: [cases]
"""


@pytest.fixture
async def h(make_database, amqp_url, topology, tmp_path):
    harness = await build(make_database, amqp_url, topology, tmp_path, actions_yaml=ACTIONS)
    await harness.coordinator().start()
    yield harness
    await teardown(harness)


async def get_collection(h: Harness, collection_id: str) -> pb.Collection:
    return await h.client.request(pb.GetCollection(
        metadata=common_pb2.QueryMetadata(acting_member="m-alice", project="demo"), collection_id=collection_id))


def children_alive(h: Harness, collection_id: str) -> list:
    return sorted((r for r in h.runs.runs.values()
                   if r.labels.get("collection_id") == collection_id and not r.outcome),
                  key=lambda r: int(r.labels["collection_item"]))


async def test_rerun_failed_relaunches_only_the_children_that_did_not_succeed(h):
    pid = (await h.start_pipeline()).pipeline_id
    first = (await h.until_step(pid, 1, "launched")).step(1)
    await h.until(lambda: len(children_alive(h, first.collection_id)) == 4)
    a, b, c, d = children_alive(h, first.collection_id)
    await h.runs.complete(a.run_id, "succeeded", output_commit=h.repo.push({"a.txt": "a\n"}, "case a"))
    await h.runs.complete(b.run_id, "succeeded", output_commit=h.repo.push({"b.txt": "b\n"}, "case b"))
    await h.runs.complete(c.run_id, "failed", "exit-nonzero")
    await h.runs.complete(d.run_id, "lost", "node-lost")
    old = await h.until_state(pid, "failed")
    assert old.step(2).state == "skipped"
    fix = h.repo.push({"evaluate.py": "fixed\n"}, "fix case c")  # what the member does before the rerun

    reply = await h.rerun_pipeline(pid, failed_only=True)
    assert list(reply.rerun_steps) == [1, 2]
    new = reply.pipeline_id
    step = (await h.until_step(new, 1, "launched")).step(1)
    assert step.pinned_commit == fix  # pinned afresh when the rerun's step starts
    await h.until(lambda: len(children_alive(h, step.collection_id)) == 2)
    rerun_runs = children_alive(h, step.collection_id)
    assert [r.labels["collection_item"] for r in rerun_runs] == ["3", "4"]
    relaunched = [x for x in h.runs.launches if x.labels.get("collection_id") == step.collection_id]
    assert sorted(dict(x.parameters)["case"] for x in relaunched) == ["c", "d"]
    assert {x.repository_commit for x in relaunched} == {fix}

    shown = await get_collection(h, step.collection_id)
    assert shown.counts.carried == 2 and shown.counts.succeeded == 2 and shown.counts.active == 2
    kept = {i.index: i for i in shown.items if i.carried_from}
    assert sorted(kept) == [1, 2] and {i.carried_from for i in kept.values()} == {pid}
    assert kept[1].run_id == a.run_id and kept[2].run_id == b.run_id and kept[1].state == "succeeded"
    assert kept[1].launch_key == a.launch_key  # the Run's own launch key, from the Pipeline it ran in
    assert not any(i.carried_from for i in shown.items if i.index in (3, 4))
    # Each child shows the commit and revision its own Run ran: the carried ones the original's.
    assert first.pinned_commit != fix
    assert {i.index: i.pinned_commit for i in shown.items} == {
        1: first.pinned_commit, 2: first.pinned_commit, 3: fix, 4: fix}
    assert kept[1].revision == first.revision and shown.items[2].revision == step.revision > 0

    for r in rerun_runs:
        await h.runs.complete(r.run_id, "succeeded")
    await h.until_step(new, 2, "launched")
    report = h.runs.run_for(2, new)
    await h.runs.complete(report.run_id, "succeeded")
    done = await h.until_state(new, "succeeded")
    assert done.step(1).message == "4 of 4 children succeeded (2 carried over)"
    got = await h.get(new)
    assert got.steps[0].collection_counts.carried == 2 and got.steps[0].collection_counts.succeeded == 4
    # Each child ran once in all: the carried ones were never launched again.
    items = [x.launch_key for x in h.runs.launches if x.labels.get("collection_item")]
    assert len(set(items)) == 6
    h.runs.assert_one_launch_per_step()
    original = await get_collection(h, first.collection_id)
    assert [i.state for i in original.items] == ["succeeded", "succeeded", "failed", "uncertain"]
