"""A waited-for Run that did not succeed carries the JSON ``error`` every failing command
does (``run wait``, ``action run --wait``, ``run rerun --wait``); a failed collection child
points at its Pipeline's ``rerun --failed``; ``collection show`` of an unknown id points at
``collection list`` — real CLI and broker, a stand-in for the services."""

from __future__ import annotations

import json

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, Topology
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
)
from tests.unit.test_cli import RUN_ID, a_run, bare_repository

PID = "0b3f1c9a-1111-4222-8333-944455556666"
CID = "2c4e6a8b-3333-5444-9555-a66677778888"


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def stage_failed() -> ec.Run:
    run = a_run(outcome="failed")
    run.reason_code, run.reason_message = "stage-failed", "the compute stage exited 4"
    run.attempts[0].exit.failure_stage = "compute"
    run.attempts[0].exit.exit_code = 4
    return run


def array_child(*, with_attempt: bool) -> ec.Run:
    """A collection child that ended ``array-unavailable`` before native work started."""
    run = ec.Run(run_id=RUN_ID, project="demo", action="sweep", action_type="slurm-job", phase="terminal",
                 outcome="failed", reason_code="array-unavailable", reason_message="a sibling was refused",
                 array_start="refused: a sibling was refused",
                 labels={"pipeline_id": PID, "pipeline_step": "1", "collection_id": CID, "collection_item": "3"})
    if with_attempt:
        run.attempts.add(number=1, state="failed", reason_code="array-unavailable")
    return run


async def test_a_failed_runs_wait_json_carries_the_error(amqp_url, topology, tmp_path):
    bare_repository(tmp_path)
    prepared = wp.PrepareActionReply(workload_id="w-1", revision=3, commit="b" * 40, action="train")
    handlers = {"PrepareAction": lambda c: prepared,
                "LaunchRun": lambda c: ec.LaunchRunReply(run_id=RUN_ID, phase="accepted", version=1),
                "RerunRun": lambda c: ec.RerunRunReply(run_id=RUN_ID, rerun_of="r-0", revision=3),
                "GetRun": lambda q: stage_failed()}
    async with StandIn(amqp_url, topology, ("workload_portfolio", "execution_core"), handlers):
        waited = await cli("run", "wait", RUN_ID, "-o", "json")
        action = await cli("action", "run", str(tmp_path), "train", "--wait", "-o", "json")
        rerun = await cli("run", "rerun", "r-0", "--wait", "-o", "json")
        handlers["GetRun"] = lambda q: a_run()
        succeeded = await cli("run", "wait", RUN_ID, "-o", "json")

    assert waited.code == 1, waited.stderr
    document = json.loads(waited.stdout)
    assert document["run_id"] == RUN_ID and document["outcome"] == "failed"  # the Run's keys stay
    error = document["error"]
    assert set(error) == {"code", "message", "hint", "exit_code"}
    assert (error["code"], error["exit_code"]) == ("stage-failed", 1)
    assert "the compute stage exited 4" in error["message"]
    assert f"`metallo run logs {RUN_ID} --stage compute`" in error["hint"]
    for result, keys in ((action, {"workload", "launch", "run"}), (rerun, {"rerun", "run"})):
        assert result.code == 1, result.stderr
        document = json.loads(result.stdout)
        assert keys < set(document) and document["error"] == error
    assert succeeded.code == 0 and "error" not in json.loads(succeeded.stdout)


@pytest.mark.parametrize("with_attempt", [True, False])
async def test_a_failed_collection_child_points_at_its_pipelines_rerun(amqp_url, topology, with_attempt):
    child = array_child(with_attempt=with_attempt)
    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": lambda q: child}):
        shown = await cli("run", "show", RUN_ID)
        waited = await cli("run", "wait", RUN_ID, "-o", "json")
    assert shown.code == 0, shown.stderr
    hint = " ".join(shown.stderr[shown.stderr.index("next:"):].split())
    assert f"`metallo pipeline rerun {PID} --failed`" in hint
    assert f"`metallo run rerun {RUN_ID}` would rerun this child alone, outside its array" in hint
    assert waited.code == 1
    error = json.loads(waited.stdout)["error"]
    assert error["code"] == "array-unavailable" and f"metallo pipeline rerun {PID} --failed" in error["hint"]


async def test_an_ordinary_runs_hint_still_names_run_rerun(amqp_url, topology):
    run = array_child(with_attempt=True)
    run.labels.clear()
    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": lambda q: run}):
        shown = await cli("run", "show", RUN_ID)
    hint = " ".join(shown.stderr[shown.stderr.index("next:"):].split())
    assert f"then `metallo run rerun {RUN_ID}`" in hint and "pipeline rerun" not in hint


async def test_an_unknown_collection_points_at_collection_list(amqp_url, topology):
    def unknown(_message):
        raise Rejected("not-found", f"no collection {CID} in Project demo")

    handlers = {"GetCollection": unknown, "CancelCollection": unknown}
    async with StandIn(amqp_url, topology, ("pipeline_coordination",), handlers):
        shown = await cli("collection", "show", CID, "-o", "json")
        cancelled = await cli("collection", "cancel", CID)
    assert shown.code == 3
    hint = json.loads(shown.stdout)["error"]["hint"]
    assert "`metallo collection list`" in hint and "run list" not in hint and "pipeline list" not in hint
    assert cancelled.code == 3 and "metallo collection list" in cancelled.stderr
