"""``metallo pipeline run|show|list``: the JSON error of a Pipeline that failed before
any step launched, and the list's repository and reason columns — against the real
RabbitMQ with a stand-in for the services (tests/unit/cli_support.py)."""

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
OWNERS = ("pipeline_coordination", "execution_core")


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def refused(code: str, message: str = "actions.yaml:3:5: command: required") -> pc.Pipeline:
    """A Pipeline that failed while its branch was prepared: no step's Run launched."""
    p = pc.Pipeline(pipeline_id="p-1", project="demo", state="failed", branch="main",
                    repository_url=REPO, reason_code=code, message=message)
    p.steps.add(index=1, action="train", state="skipped")
    return p


def ended(state: str, reason: str = "") -> pc.Pipeline:
    """A Pipeline whose first step's Run ran."""
    p = pc.Pipeline(pipeline_id="p-2", project="demo", state=state, branch="dev",
                    repository_url=REPO, reason_code=reason, failed_step=1 if reason else 0)
    p.steps.add(index=1, action="train", state="failed" if reason else "succeeded", run_id=RUN_ID)
    return p


def started(_command) -> pc.StartPipelineReply:
    return pc.StartPipelineReply(pipeline_id="p-1", state="preparing")


async def test_run_wait_json_carries_the_error_of_a_refused_pipeline(amqp_url, topology):
    handlers = {"StartPipeline": started, "GetPipeline": lambda q: refused("actions-invalid")}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        invalid = await cli("pipeline", "run", REPO, "--wait", "-o", "json")
        handlers["GetPipeline"] = lambda q: refused("branch-not-found", "no branch main")
        missing = await cli("pipeline", "run", REPO, "--wait", "--output", "json")

    assert invalid.code == 2, invalid.stderr
    document = json.loads(invalid.stdout)  # one JSON document on stdout
    # The keys scripts already read stay, and the error has the shape of every other
    # failing command's (metallo.cli.exits.error_document).
    assert document["start"]["pipeline_id"] == "p-1"
    assert document["pipeline"]["state"] == "failed"
    assert document["pipeline"]["reason_code"] == "actions-invalid"
    error = document["error"]
    assert set(error) == {"code", "message", "hint", "exit_code"}
    assert error["code"] == "actions-invalid" and error["exit_code"] == 2
    assert "p-1" in error["message"] and "actions.yaml:3:5: command: required" in error["message"]
    assert "python -m workload_portfolio check" in error["hint"]
    assert "next:" in invalid.stderr  # people still read it on stderr

    assert missing.code == 3
    error = json.loads(missing.stdout)["error"]
    assert (error["code"], error["exit_code"]) == ("branch-not-found", 3)
    assert "`metallo repo branches https://git.example/demo.git` lists" in error["hint"]


async def test_show_wait_json_carries_the_error_only_when_waiting(amqp_url, topology):
    handlers = {"GetPipeline": lambda q: refused("action-not-found", "no action 'tran'")}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        waited = await cli("pipeline", "show", "p-1", "--wait", "-o", "json")
        read = await cli("pipeline", "show", "p-1", "-o", "json")
    assert waited.code == 3
    document = json.loads(waited.stdout)
    assert document["pipeline_id"] == "p-1" and document["error"]["code"] == "action-not-found"
    assert read.code == 0 and "error" not in json.loads(read.stdout)  # a read found it


async def test_run_wait_json_has_an_error_only_when_the_pipeline_did_not_succeed(amqp_url, topology):
    outcomes = iter([ended("succeeded"), ended("failed", "stage-failed")])
    handlers = {"StartPipeline": started, "GetPipeline": lambda q: next(outcomes)}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        succeeded = await cli("pipeline", "run", REPO, "--wait", "-o", "json")
        failed = await cli("pipeline", "run", REPO, "--wait", "-o", "json")
    assert succeeded.code == 0 and "error" not in json.loads(succeeded.stdout)
    assert failed.code == 1  # a step's Run failed: the Pipeline says why (reason_code)
    document = json.loads(failed.stdout)
    assert document["pipeline"]["reason_code"] == "stage-failed"
    assert (document["error"]["code"], document["error"]["exit_code"]) == ("stage-failed", 1)


async def test_run_wait_timeout_json_keeps_the_started_pipeline(amqp_url, topology):
    running = pc.Pipeline(pipeline_id="p-1", project="demo", state="preparing", branch="main")
    handlers = {"StartPipeline": started, "GetPipeline": lambda q: running}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        result = await cli("pipeline", "run", REPO, "--wait", "--timeout", "1", "-o", "json")
    assert result.code == 4
    document = json.loads(result.stdout)
    assert document["start"]["pipeline_id"] == "p-1" and document["pipeline"] is None
    assert document["error"]["code"] == "wait-timeout" and document["error"]["exit_code"] == 4


async def test_run_wait_with_no_answer_says_to_resume_with_show_wait(amqp_url, topology,
                                                                   monkeypatch):
    # The stack stops while `pipeline run --wait` waits: the hint must resume the wait,
    # not "run the same …" (that would start a second Pipeline).
    monkeypatch.setenv("METALLO_CLI_TIMEOUT", "1")
    running = pc.Pipeline(pipeline_id="p-1", project="demo", state="preparing", branch="main")
    handlers: dict = {"StartPipeline": started}

    def first_then_silence(_query):
        handlers["GetPipeline"] = None
        return running

    handlers["GetPipeline"] = first_then_silence
    async with StandIn(amqp_url, topology, OWNERS, handlers) as s:
        result = await cli("pipeline", "run", REPO, "--wait", "--quiet", "-o", "json")
    assert result.code == 4, result.stderr
    document = json.loads(result.stdout)
    assert document["start"]["pipeline_id"] == "p-1" and document["pipeline"] is None
    error = document["error"]
    assert error["code"] == "outcome-uncertain" and error["exit_code"] == 4
    assert "`metallo pipeline show p-1 --wait`" in error["hint"]
    assert "`metallo dev status`" in error["hint"] and "run the same" not in error["hint"]
    assert s.names().count("StartPipeline") == 1


async def test_list_table_shows_repository_and_reason(amqp_url, topology):
    long_url = "https://git.example.org/a/very/long/group/path/of/projects/demo-models.git"
    stopped = ended("stopped", "stopped-by-member")
    stopped.repository_url = long_url
    reply = pc.ListPipelinesReply(pipelines=[refused("actions-invalid"), stopped])
    async with StandIn(amqp_url, topology, OWNERS, {"ListPipelines": lambda q: reply}):
        result = await cli("pipeline", "list")
    assert result.code == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if "pipeline" in line
                  and "state" in line)
    assert [c for c in ("pipeline", "repository", "branch", "state", "reason", "steps")
            if c in header] == ["pipeline", "repository", "branch", "state", "reason", "steps"]
    row = next(line for line in result.stdout.splitlines() if "p-1" in line)
    assert "git.example/demo.git" in row and "https://" not in row
    assert "actions-invalid" in row
    row = next(line for line in result.stdout.splitlines() if "p-2" in line)
    assert "stopped-by-member" in row and "…" in row and "demo-models.git" in row


def test_repository_text_keeps_the_name_and_a_bounded_width():
    from metallo.cli.pipelines import repository_text

    assert repository_text(REPO) == "git.example/demo.git"
    assert repository_text("/srv/git/demo.git") == "/srv/git/demo.git"
    short = repository_text("https://host/" + "g/" * 40 + "demo.git", width=30)
    assert len(short) == 30 and short.startswith("…") and short.endswith("/demo.git")


def test_a_failed_pipelines_progress_names_the_step_that_failed():
    """Progress names the step that failed, not the last one ("step 4/4 flaky skipped")."""
    from metallo.cli.pipelines import current_step
    from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc

    p = pc.Pipeline(pipeline_id="p-1", state="failed")
    for index, (action, state) in enumerate(
        [("train", "succeeded"), ("flaky", "failed"), ("report", "skipped"), ("last", "skipped")],
        start=1,
    ):
        p.steps.add(index=index, action=action, state=state)
    assert current_step(p).action == "flaky"
    p.steps[1].state = "succeeded"
    p.steps[2].state = p.steps[3].state = "succeeded"
    assert current_step(p).action == "last"  # all ended well: the last one


async def test_a_reruns_commit_is_labelled_as_its_graphs(amqp_url, topology):
    def rerun(_q):
        p = pc.Pipeline(pipeline_id="p-2", project="demo", state="succeeded", branch="main",
                        rerun_of="p-1", prepared_commit="a" * 40)
        p.steps.add(index=1, action="train", state="succeeded", run_id=RUN_ID, pinned_commit="f" * 40)
        return p

    async with StandIn(amqp_url, topology, OWNERS, {"GetPipeline": rerun}):
        shown = await cli("pipeline", "show", "p-2")
    assert shown.code == 0, shown.stderr
    assert "graph commit" in shown.stdout
    assert "(graph of p-1; each step runs at its input commit)" in " ".join(shown.stdout.split())
    assert "ffffffffffff" in shown.stdout  # the step's own input commit


async def test_rerun_json_start_carries_the_children_run_again(amqp_url, topology):
    def rerun_pipeline(_q):
        p = pc.Pipeline(pipeline_id="p-2", project="demo", state="running", branch="main", rerun_of="p-1")
        step = p.steps.add(index=1, action="sweep", state="waiting", collection_id="col-2")
        step.collection_counts.total, step.collection_counts.carried = 5, 3
        step.collection_counts.succeeded = 3
        p.steps.add(index=2, action="report", state="waiting")
        return p

    handlers = {"RerunPipeline": lambda c: pc.RerunPipelineReply(pipeline_id="p-2", state="running",
                                                                 rerun_of="p-1", rerun_steps=[1, 2]),
                "GetPipeline": rerun_pipeline}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        text = await cli("pipeline", "rerun", "p-1", "--failed")
        document = await cli("pipeline", "rerun", "p-1", "--failed", "-o", "json")
    assert text.code == 0 and document.code == 0, document.stderr
    assert "rerun of p-1: steps 1, 2 run again" in text.stderr
    assert "step 1 (sweep): 2 of 5 children run again, 3 carried over" in text.stderr
    start = json.loads(document.stdout)["start"]
    assert start["rerun_steps"] == [1, 2]
    assert start["carried_collections"] == [{"step": 1, "action": "sweep", "collection_id": "col-2",
                                             "total": 5, "carried": 3, "run_again": 2}]
