"""``metallo pipeline show`` draws the step graph; ``pipeline rerun`` and ``run rerun``
send their commands and show lineage — against the real RabbitMQ with a stand-in for
the services (tests/unit/cli_support.py)."""

from __future__ import annotations

import json

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Topology
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
)

PID = "0b3f1c9a-1111-4222-8333-944455556666"
RUN_ID = "5d7e9c1a-2222-4333-8444-955566667777"
OWNERS = ("pipeline_coordination", "execution_core")


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def diamond() -> pc.Pipeline:
    p = pc.Pipeline(pipeline_id=PID, project="demo", state="failed", branch="main", failed_step=2,
                    reason_code="exit-nonzero", partial=True, max_active=4,
                    counts=pc.StepCounts(total=5, succeeded=3, failed=1, skipped=1))
    p.steps.add(index=1, action="prep", state="succeeded", run_id=RUN_ID)
    p.steps.add(index=2, action="train-b", state="failed", needs=[1], when="success", reason_code="exit-nonzero")
    p.steps.add(index=3, action="train-c", state="succeeded", needs=[1], when="success")
    p.steps.add(index=4, action="compare", state="skipped", needs=[2, 3], when="success",
                reason_code="needs-not-succeeded")
    p.steps.add(index=5, action="clean", state="succeeded", needs=[4], when="failure")
    return p


async def test_show_draws_every_step_and_edge_and_says_partial_failure(amqp_url, topology):
    async with StandIn(amqp_url, topology, OWNERS, {"GetPipeline": lambda q: diamond()}):
        shown = await cli("pipeline", "show", PID)
        as_json = await cli("pipeline", "show", PID, "--output", "json")
    assert shown.code == 0, shown.stderr
    text = shown.stdout
    for line in ("1 prep succeeded", "2 train-b failed", "3 train-c succeeded", "4 compare skipped",
                 "5 clean succeeded"):
        assert line in text, text
    # compare hangs under train-b (its first need) and is referenced under train-c.
    assert "↳ 4 compare (also here)" in text
    assert "when failure" in text and "partial failure" in text
    assert "5 steps: 3 succeeded, 1 failed, 1 skipped" in text
    document = json.loads(as_json.stdout)
    assert document["partial"] is True and document["steps"][3]["needs"] == [2, 3]
    assert document["counts"]["succeeded"] == 3


async def test_pipeline_rerun_failed_sends_failed_only_and_names_the_steps(amqp_url, topology):
    seen: list[pc.RerunPipeline] = []

    def rerun(cmd):
        seen.append(cmd)
        return pc.RerunPipelineReply(pipeline_id="p-new", state="running", rerun_of=PID, rerun_steps=[2, 4])

    def rerun_pipeline(q):
        p = pc.Pipeline(pipeline_id=q.pipeline_id, project="demo", state="running", rerun_of=PID)
        p.steps.add(index=2, action="sweep", state="waiting", collection_id="c-1",
                    collection_counts=pc.CollectionCounts(total=20, succeeded=6, carried=6, waiting=14))
        p.steps.add(index=4, action="report", state="waiting", needs=[2])
        return p

    async with StandIn(amqp_url, topology, OWNERS, {"RerunPipeline": rerun, "GetPipeline": rerun_pipeline}):
        done = await cli("pipeline", "rerun", PID, "--failed", "--max-active", "2")
        as_json = await cli("pipeline", "rerun", PID, "-o", "json")
    assert done.code == 0, done.stderr
    assert seen[0].failed_only and seen[0].max_active == 2 and seen[0].pipeline_id == PID
    assert not seen[1].failed_only
    assert f"rerun of {PID}: steps 2, 4 run again" in done.stderr and "p-new" in done.stdout
    assert "step 2 (sweep): 14 of 20 children run again, 6 carried over" in done.stderr
    assert json.loads(as_json.stdout)["start"]["rerun_of"] == PID


async def test_run_rerun_sends_rerun_run_and_show_names_the_original(amqp_url, topology):
    new = "7e7e7e7e-3333-4444-8555-a66677778888"
    seen: list[ec.RerunRun] = []

    def rerun(cmd):
        seen.append(cmd)
        return ec.RerunRunReply(run_id=new, phase="accepted", version=1, rerun_of=RUN_ID, revision=2,
                                repository_commit="1" * 40)

    def get(q):
        return ec.Run(run_id=q.run_id, project="demo", phase="accepted", rerun_of=RUN_ID, revision=2)

    async with StandIn(amqp_url, topology, OWNERS, {"RerunRun": rerun, "GetRun": get}):
        done = await cli("run", "rerun", RUN_ID)
        as_json = await cli("run", "rerun", RUN_ID, "--output", "json")
        shown = await cli("run", "show", new)
    assert done.code == 0, done.stderr
    assert seen[0].run_id == RUN_ID and seen[0].metadata.command_id
    assert f"Run {new} reruns {RUN_ID} (revision 2, at 111111111111" in done.stdout
    assert json.loads(as_json.stdout)["rerun"]["rerun_of"] == RUN_ID
    assert "rerun of" in shown.stdout and RUN_ID in shown.stdout


def test_a_long_chain_is_drawn_as_levels_not_a_deep_tree():
    from rich.console import Console

    from metallo.cli.pipeline_graph import MAX_TREE_DEPTH, graph_tree, levels

    chain = pc.Pipeline(pipeline_id=PID, state="running")
    for i in range(1, 31):
        chain.steps.add(index=i, action=f"s{i}", state="waiting", needs=[i - 1] if i > 1 else [])
    assert [len(level) for level in levels(chain)] == [1] * 30
    console = Console(width=100, record=True)
    console.print(graph_tree(chain))
    text = console.export_text()
    assert "level 30: 30 s30 waiting" in text and len(levels(chain)) > MAX_TREE_DEPTH
    assert [[s.index for s in level] for level in levels(diamond())] == [[1], [2, 3], [4], [5]]
