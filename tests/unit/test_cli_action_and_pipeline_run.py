"""``metallo action run`` and ``metallo pipeline run|stop`` (with ``run cancel``): the requests
they send, their replayable ids, waiting and exit codes — against the real RabbitMQ with a
stand-in for the other services (tests/unit/cli_support.py)."""

from __future__ import annotations

import json
import uuid

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, Topology
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
)
from tests.unit.test_cli import RUN_ID, a_pipeline, a_run, bare_repository


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


async def test_action_run_prepares_then_launches_with_replayable_ids(amqp_url, topology, tmp_path):
    bare_repository(tmp_path)
    prepared = wp.PrepareActionReply(workload_id="w-1", revision=3, commit="b" * 40,
                                     action="train", created=True)
    handlers = {"PrepareAction": lambda c: prepared,
                "LaunchRun": lambda c: ec.LaunchRunReply(run_id=RUN_ID, phase="accepted", version=1),
                "GetRun": lambda q: a_run()}
    root = str(uuid.uuid4())
    async with StandIn(amqp_url, topology, ("workload_portfolio", "execution_core"), handlers) as s:
        first = await cli("action", "run", str(tmp_path), "train", "--branch", "dev",
                          "--command-id", root, "--wait", "--output", "json")
        again = await cli("action", "run", str(tmp_path), "train", "--branch", "dev",
                          "--command-id", root)
    assert first.code == 0 and again.code == 0
    assert again.stdout.strip() == RUN_ID
    document = json.loads(first.stdout)
    assert document["launch"]["run_id"] == RUN_ID and document["run"]["outcome"] == "succeeded"
    prepare, launch = s.received[0], s.received[1]
    assert s.names()[:2] == ["PrepareAction", "LaunchRun"]
    assert prepare.repository_url == str(tmp_path.resolve()) and prepare.branch == "dev"
    assert prepare.action == "train"
    assert (launch.workload_id, launch.revision) == ("w-1", 3)
    replay = [m for m in s.received if m.DESCRIPTOR.name in ("PrepareAction", "LaunchRun")][2:]
    # the same --command-id sends the same command ids again (safe retry)
    assert [m.metadata.command_id for m in replay] == [prepare.metadata.command_id,
                                                       launch.metadata.command_id]
    assert prepare.metadata.command_id != launch.metadata.command_id


async def test_action_run_whose_wait_gets_no_answer_says_to_wait_for_that_run(
        amqp_url, topology, tmp_path, monkeypatch):
    bare_repository(tmp_path)
    # The Run was accepted; only the wait was cut short (the stack stopped): the hint
    # names the Run to wait for, not a relaunch with --command-id.
    monkeypatch.setenv("METALLO_CLI_TIMEOUT", "1")
    prepared = wp.PrepareActionReply(workload_id="w-1", revision=3, commit="b" * 40,
                                     action="train", created=False)
    handlers = {"PrepareAction": lambda c: prepared,
                "LaunchRun": lambda c: ec.LaunchRunReply(run_id=RUN_ID, phase="accepted", version=1),
                "GetRun": None}
    async with StandIn(amqp_url, topology, ("workload_portfolio", "execution_core"), handlers):
        result = await cli("action", "run", str(tmp_path), "train", "--wait", "--quiet")
    assert result.code == 4
    assert f"metallo run wait {RUN_ID}" in result.stderr
    assert "--command-id" not in result.stderr


async def test_action_run_actions_invalid_lists_problems(amqp_url, topology, tmp_path):
    bare_repository(tmp_path)
    def invalid(_c):
        raise Rejected("actions-invalid", "actions.yaml has 1 problem",
                       {"problem.001": "actions.yaml:3:5: actions.train.cpus: bad"})

    async with StandIn(amqp_url, topology, ("workload_portfolio",), {"PrepareAction": invalid}):
        result = await cli("action", "run", str(tmp_path), "train")
    assert result.code == 2
    assert "actions.yaml:3:5" in result.stderr and "python -m workload_portfolio check" in result.stderr


async def test_pipeline_run_wait_and_exit_codes(amqp_url, topology):
    states = iter(["running", "succeeded"])
    handlers = {"StartPipeline": lambda c: pc.StartPipelineReply(pipeline_id="p-1", state="preparing"),
                "GetPipeline": lambda q: a_pipeline(next(states)),
                "GetRun": lambda q: a_run("running")}
    async with StandIn(amqp_url, topology, ("pipeline_coordination", "execution_core"), handlers) as s:
        ok = await cli("pipeline", "run", "https://git.example/demo.git", "--wait", "-o", "json")
        handlers["GetPipeline"] = lambda q: a_pipeline("failed")
        failed = await cli("pipeline", "show", "p-1", "--wait")
        handlers["ListPipelines"] = lambda q: pc.ListPipelinesReply(pipelines=[a_pipeline("failed")])
        listed = await cli("pipeline", "list", "-o", "json")
    assert ok.code == 0, ok.stderr
    assert json.loads(ok.stdout)["pipeline"]["state"] == "succeeded"
    assert "2 steps: 1 succeeded, 1 active · step 2 evaluate launched" in ok.stderr
    start = s.received[0]
    assert start.repository_url == "https://git.example/demo.git" and start.branch == "main"
    assert list(start.actions) == []  # Run all in order
    assert failed.code == 1
    # What to do next names the failed step's Run.
    assert f"next: `metallo run show {RUN_ID}` says why step 2 (evaluate) failed" in failed.stderr
    assert json.loads(listed.stdout)["pipelines"][0]["pipeline_id"] == "p-1"


async def test_pipeline_refused_before_any_step_exits_like_the_refused_request(amqp_url, topology):
    def refused(code: str) -> pc.Pipeline:
        p = pc.Pipeline(pipeline_id="p-1", project="demo", state="failed", branch="main",
                        reason_code=code, message="actions.yaml:3:5: command: required")
        p.steps.add(index=1, action="train", state="skipped")
        return p

    handlers = {"StartPipeline": lambda c: pc.StartPipelineReply(pipeline_id="p-1", state="preparing"),
                "GetPipeline": lambda q: refused("actions-invalid")}
    async with StandIn(amqp_url, topology, ("pipeline_coordination",), handlers):
        invalid = await cli("pipeline", "run", "https://git.example/demo.git", "--wait")
        handlers["GetPipeline"] = lambda q: refused("branch-not-found")
        missing = await cli("pipeline", "show", "p-1", "--wait")
    assert invalid.code == 2  # as `metallo action run` on that branch
    assert "actions-invalid" in invalid.stderr and "python -m workload_portfolio check" in invalid.stderr
    assert missing.code == 3 and "`metallo repo branches REPO`" in missing.stderr


async def test_pipeline_whose_collection_step_failed_is_an_ordinary_failure(amqp_url, topology):
    def failed_sweep() -> pc.Pipeline:
        p = pc.Pipeline(pipeline_id="p-1", project="demo", state="failed", branch="main", failed_step=1,
                        reason_code="collection-failed", message="3 of 5 children succeeded")
        step = p.steps.add(index=1, action="sweep", state="failed", collection_id="col-1",
                           reason_code="collection-failed")
        step.collection_counts.total, step.collection_counts.succeeded = 5, 3
        return p

    handlers = {"StartPipeline": lambda c: pc.StartPipelineReply(pipeline_id="p-1", state="preparing"),
                "GetPipeline": lambda q: failed_sweep()}
    async with StandIn(amqp_url, topology, ("pipeline_coordination",), handlers):
        ran = await cli("pipeline", "run", "https://git.example/demo.git", "--action", "sweep", "--wait")
        shown = await cli("pipeline", "show", "p-1", "--wait")
        as_json = await cli("pipeline", "run", "https://git.example/demo.git", "--wait", "-o", "json")
    for result in (ran, shown, as_json):
        assert result.code == 1, result.stderr
        assert "before any step launched" not in result.stderr
        assert "correct the request" not in result.stderr
    assert "`metallo collection show col-1`" in shown.stderr
    document = json.loads(as_json.stdout)
    assert document["pipeline"]["state"] == "failed"
    # An ordinary failure (exit 1), not a refusal: its error's code is the Pipeline's reason.
    assert (document["error"]["code"], document["error"]["exit_code"]) == ("collection-failed", 1)


async def test_pipeline_stop_and_run_cancel_report_what_was_recorded(amqp_url, topology):
    handlers = {
        "StopPipeline": lambda c: pc.StopPipelineReply(pipeline_id=c.pipeline_id, stop_recorded=True,
                                                       state="stopping"),
        "CancelRun": lambda c: ec.CancelRunReply(run_id=c.run_id, cancel_recorded=False,
                                                 phase="terminal", outcome="succeeded"),
    }
    async with StandIn(amqp_url, topology, ("pipeline_coordination", "execution_core"), handlers) as s:
        stopped = await cli("pipeline", "stop", "p-1", "--reason", "wrong branch")
        cancelled = await cli("run", "cancel", RUN_ID, "-o", "json")
    assert stopped.code == 0 and "stop of p-1 recorded" in stopped.stdout
    assert s.received[0].reason == "wrong branch"
    assert cancelled.code == 0
    assert json.loads(cancelled.stdout)["cancel"]["outcome"] == "succeeded"
