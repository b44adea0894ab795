"""RerunRun: a new Run of the same revision at the same pinned commits, under runs.rerun."""

from __future__ import annotations

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected
from tests.integration.execution_core_support import cmd_meta, stack_factory

pytestmark = pytest.mark.integration

HAND_OFF = "a" * 40


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


async def rerun(stack, run_id: str, member: str = "m-alice", command_id: str | None = None) -> pb.RerunRunReply:
    return await stack.client.request(
        pb.RerunRun(metadata=cmd_meta(member, command_id=command_id), run_id=run_id), timeout=15
    )


async def test_rerun_runs_the_same_revision_at_the_same_commits_and_shows_its_lineage(make_stack):
    stack = await make_stack()
    labels = {"pipeline_id": "p-1", "pipeline_step": "2", "team": "vision"}
    first = await stack.launch(repository_commit=HAND_OFF, launch_key="pipeline:p-1:step:2:1", labels=labels)
    original = await stack.terminal(first)

    reply = await rerun(stack, first, command_id="rerun-1")
    assert reply.rerun_of == first and reply.run_id != first and reply.phase == "accepted"
    assert (reply.revision, reply.repository_commit) == (original.revision, HAND_OFF)
    assert (await rerun(stack, first, command_id="rerun-1")).run_id == reply.run_id  # same command, same Run

    again = await stack.terminal(reply.run_id)
    assert again.rerun_of == first and original.rerun_of == ""
    assert (again.workload_id, again.revision) == (original.workload_id, original.revision)
    assert [(r.role, r.commit) for r in again.repositories] == [(r.role, r.commit) for r in original.repositories]
    assert again.repositories[0].commit == HAND_OFF
    assert dict(again.labels) == {"team": "vision"}  # the step's labels stay with the step's Run
    assert again.launch_key == "" and again.outcome == "succeeded"
    (accepted,) = await stack.wait_events(pb.RunAccepted, reply.run_id)
    assert accepted.revision == original.revision


async def test_rerun_needs_its_own_capability_and_a_run_of_the_project(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))  # no planning: keep Runs accepted
    run_id = await stack.launch()
    with pytest.raises(Rejected) as e:
        await rerun(stack, run_id, member="m-bob")  # runs.read only
    assert e.value.code == "permission-denied" and e.value.details["capability"] == "runs.rerun"
    with pytest.raises(Rejected) as e:
        await rerun(stack, "0b3f1c9a-1111-4222-8333-944455556666")
    assert e.value.code == "not-found"
    with pytest.raises(Rejected) as e:
        await rerun(stack, "not-a-run")
    assert e.value.code == "invalid-argument"

    # Checked now, as a launch is: without runs.rerun the next rerun is refused, launching still works.
    text = stack.governance.read_text().replace("        - runs.rerun\n", "", 1)
    stack.governance.write_text(text)
    with pytest.raises(Rejected) as e:
        await rerun(stack, run_id)
    assert e.value.code == "permission-denied"
    assert await stack.launch()
