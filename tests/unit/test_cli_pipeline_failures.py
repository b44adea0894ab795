"""``metallo pipeline run|show --wait`` of a Pipeline that did not succeed: the JSON
``error`` every failing command carries (code = the Pipeline's ``reason_code``), a hint
that fits what became of a collection's children, and progress lines while a collection
step runs — against the real RabbitMQ with a stand-in for the services
(tests/unit/cli_support.py)."""

from __future__ import annotations

import json

import pytest

from metallo.messaging import Topology
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
)

REPO = "https://git.example/demo.git"
RUN_ID = "9b1c7f7e-5d43-4d55-9f0e-000000000001"
CID = "2c4e6a8b-3333-5444-9555-a66677778888"
OWNERS = ("pipeline_coordination", "execution_core")


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def started(_command) -> pc.StartPipelineReply:
    return pc.StartPipelineReply(pipeline_id="p-1", state="preparing")


def sweep(state: str, *, reason: str = "", message: str = "", **counts) -> pc.Pipeline:
    """A Pipeline whose step 1 is a collection of 20 children with ``counts``."""
    ended = state in ("succeeded", "failed", "stopped")
    p = pc.Pipeline(pipeline_id="p-1", project="demo", state=state, branch="main", repository_url=REPO,
                    reason_code=reason, message=message, failed_step=1 if reason else 0)
    step = p.steps.add(index=1, action="sweep", collection_id=CID, reason_code=reason,
                       state=("failed" if reason == "collection-failed" else "cancelled") if reason
                       else ("succeeded" if ended else "launched"))
    step.collection_counts.CopyFrom(pc.CollectionCounts(total=20, **counts))
    p.steps.add(index=2, action="report", state="skipped" if reason else "waiting", needs=[1])
    return p


def plain_failure(state: str = "failed", reason: str = "stage-failed") -> pc.Pipeline:
    p = pc.Pipeline(pipeline_id="p-1", project="demo", state=state, branch="main", repository_url=REPO,
                    reason_code=reason, message="the compute stage exited 4", failed_step=1,
                    stopped_by="m-bob" if state == "stopped" else "")
    p.steps.add(index=1, action="train", state="failed", run_id=RUN_ID, reason_code=reason)
    return p


async def test_a_failed_collection_steps_json_carries_the_error(amqp_url, topology):
    failed = sweep("failed", reason="collection-failed", message="2 of 20 children failed",
                   succeeded=18, failed=2)
    handlers = {"StartPipeline": started, "GetPipeline": lambda q: failed}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        run = await cli("pipeline", "run", REPO, "--wait", "-o", "json")
        show = await cli("pipeline", "show", "p-1", "--wait", "-o", "json")
        read = await cli("pipeline", "show", "p-1", "-o", "json")

    assert run.code == 1, run.stderr
    document = json.loads(run.stdout)
    assert document["start"]["pipeline_id"] == "p-1" and document["pipeline"]["state"] == "failed"
    error = document["error"]
    assert set(error) == {"code", "message", "hint", "exit_code"}
    assert (error["code"], error["exit_code"]) == ("collection-failed", 1)
    assert "step 1 (sweep)" in error["message"] and "2 of 20 children failed" in error["message"]
    assert f"`metallo collection show {CID}`" in error["hint"] and "(sweep) failed" in error["hint"]
    assert "`metallo pipeline rerun p-1 --failed`" in error["hint"]
    assert "error:" in run.stderr and "next:" in run.stderr

    assert show.code == 1
    assert json.loads(show.stdout)["error"] == error  # the same failure, the same document
    assert read.code == 0 and "error" not in json.loads(read.stdout)  # a read found it


async def test_a_cancelled_collections_hint_says_cancelled_not_failed(amqp_url, topology):
    cancelled = sweep("failed", reason="collection-cancelled", message="collection cancelled by m-alice",
                      succeeded=5, cancelled=15)
    async with StandIn(amqp_url, topology, OWNERS, {"GetPipeline": lambda q: cancelled}):
        waited = await cli("pipeline", "show", "p-1", "--wait", "-o", "json")
        shown = await cli("pipeline", "show", "p-1")
    assert waited.code == 1, waited.stderr
    error = json.loads(waited.stdout)["error"]
    assert error["code"] == "collection-cancelled" and error["exit_code"] == 1
    assert "children of step 1 (sweep) were cancelled" in error["hint"]
    assert "failed and their Runs" not in error["hint"]
    hint = " ".join(shown.stderr[shown.stderr.index("next:"):].split())
    assert shown.code == 0 and "(sweep) were cancelled and their Runs" in hint


async def test_a_plain_step_or_a_stop_carries_the_error_too(amqp_url, topology):
    outcomes = iter([plain_failure(), plain_failure("stopped", "stopped-by-member")])
    handlers = {"StartPipeline": started, "GetPipeline": lambda q: next(outcomes)}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        failed = await cli("pipeline", "run", REPO, "--wait", "-o", "json")
        stopped = await cli("pipeline", "run", REPO, "--wait", "-o", "json")
    assert failed.code == 1 and stopped.code == 1, failed.stderr
    error = json.loads(failed.stdout)["error"]
    assert (error["code"], error["exit_code"]) == ("stage-failed", 1)
    assert "the compute stage exited 4" in error["message"]
    assert f"`metallo run show {RUN_ID}` says why step 1 (train) failed" in error["hint"]
    error = json.loads(stopped.stdout)["error"]
    assert (error["code"], error["exit_code"]) == ("stopped-by-member", 1)


async def test_waiting_on_a_collection_prints_a_line_each_time_its_counts_change(amqp_url, topology):
    polls = [sweep("running", waiting=20), sweep("running", waiting=20),
             sweep("running", active=3, waiting=17), sweep("running", active=3, waiting=17),
             sweep("running", active=3, succeeded=5, failed=1, waiting=11),
             sweep("failed", reason="collection-failed", succeeded=18, failed=2)]
    answers = iter(polls)
    handlers = {"StartPipeline": started, "GetPipeline": lambda q: next(answers, polls[-1])}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        loud = await cli("pipeline", "run", REPO, "--wait")
        answers = iter(polls)
        quiet = await cli("pipeline", "run", REPO, "--wait", "--quiet")
    assert loud.code == 1, loud.stderr
    lines = loud.stderr.splitlines()
    for counts in ("step 1 sweep: 20 waiting ·", "step 1 sweep: 3 active, 17 waiting ·",
                   "step 1 sweep: 3 active, 5 succeeded, 1 failed, 11 waiting ·",
                   "step 1 sweep: 18 succeeded, 2 failed ·"):
        assert sum(counts in line for line in lines) == 1, (counts, loud.stderr)
    assert quiet.code == 1 and "step 1 sweep:" not in quiet.stderr


def test_a_second_running_collection_is_in_the_line_too():
    from metallo.cli.pipeline_outcome import current_step, progress_label

    p = sweep("running", active=2, waiting=18)
    other = p.steps.add(index=3, action="grid", state="launched", collection_id="col-3")
    other.collection_counts.CopyFrom(pc.CollectionCounts(total=4, active=1, succeeded=3))
    line = progress_label(p, current_step(p))
    assert line.endswith("step 1 sweep: 2 active, 18 waiting · step 3 grid: 1 active, 3 succeeded")


def test_rerun_steps_read_for_one_and_for_many():
    from metallo.cli.pipelines import rerun_steps_text

    assert rerun_steps_text([1]) == "step 1 runs again"
    assert rerun_steps_text([1, 3]) == "steps 1, 3 run again"
