"""What ``metallo`` prints for people: help shows flags without a value type, and a
list with more pages prints the whole command for the next one (docs/quickstart.md)."""

from __future__ import annotations

import json
import shlex

import pytest

from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Topology
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
    run_cli,
)


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


@pytest.mark.parametrize("command", [[], ["run"], ["run", "list"], ["pipeline", "run"],
                                     ["dev", "up"], ["action", "run"]])
def test_help_shows_no_value_type_for_a_flag(command):
    helped = run_cli(*command, "--help")
    assert helped.code == 0, helped.stderr
    assert "--help" in helped.stdout
    assert "<bool>" not in helped.stdout


def test_help_still_shows_what_an_option_takes():
    helped = run_cli("run", "list", "--help")
    lines = {line.split()[1]: line for line in helped.stdout.splitlines()
             if len(line.split()) > 1 and line.split()[1].startswith("--")}
    assert "<str>" in lines["--outcome"] and "<table|json>" in lines["--output"]
    assert "<" not in lines["--active"].split("only Runs")[0]  # a flag: nothing to type


def next_command(stdout: str) -> list[str]:
    """The arguments of the ``more: metallo …`` line (without ``metallo``)."""
    line = next(line for line in stdout.splitlines() if line.startswith("more: "))
    words = shlex.split(line.removeprefix("more: "))
    assert words[0] == "metallo"
    return words[1:]


async def test_run_list_prints_the_whole_next_command(amqp_url, topology):
    def page(query: ec.ListRuns) -> ec.ListRunsReply:
        if query.page.page_token:
            return ec.ListRunsReply(runs=[ec.Run(run_id="r-3", action="train")])
        return ec.ListRunsReply(runs=[ec.Run(run_id="r-1"), ec.Run(run_id="r-2")],
                                page=common_pb2.PageInfo(next_page_token="tok en/2"))

    async with StandIn(amqp_url, topology, ("execution_core",), {"ListRuns": page}) as standin:
        first = await cli("run", "list", "--active", "--outcome", "failed", "--limit", "2",
                          "--project", "demo")
        args = next_command(first.stdout)
        second = await cli(*args)
    assert first.code == 0 and second.code == 0, second.stderr
    assert args[:2] == ["run", "list"] and "--page-token" in args
    sent = [m for m in standin.received if isinstance(m, ec.ListRuns)]
    assert len(sent) == 2
    # The next page is asked with exactly the first page's filters and its token.
    assert sent[1].page.page_token == "tok en/2"
    assert (sent[1].active_only, sent[1].outcome, sent[1].page.page_size) == (True, "failed", 2)
    assert sent[1].metadata.project == "demo"
    assert "r-3" in second.stdout and "more:" not in second.stdout


async def test_pipeline_list_prints_the_whole_next_command(amqp_url, topology):
    def page(query: pc.ListPipelines) -> pc.ListPipelinesReply:
        if query.page.page_token:
            return pc.ListPipelinesReply()
        return pc.ListPipelinesReply(pipelines=[pc.Pipeline(pipeline_id="p-1")],
                                     page=common_pb2.PageInfo(next_page_token="t2"))

    async with StandIn(amqp_url, topology, ("pipeline_coordination",),
                       {"ListPipelines": page}) as standin:
        first = await cli("pipeline", "list", "--state", "failed", "--limit", "1")
        second = await cli(*next_command(first.stdout))
    assert second.code == 0, second.stderr
    sent = [m for m in standin.received if isinstance(m, pc.ListPipelines)]
    assert (sent[1].state, sent[1].page.page_size, sent[1].page.page_token) == ("failed", 1, "t2")


async def test_collection_list_pages_like_the_other_lists(amqp_url, topology):
    def page(query: pc.ListCollections) -> pc.ListCollectionsReply:
        if query.page.page_token:
            return pc.ListCollectionsReply()
        return pc.ListCollectionsReply(
            collections=[pc.Collection(collection_id="c-1", pipeline_id="p-1", action="sweep",
                                       state="running")],
            page=common_pb2.PageInfo(next_page_token="c2"))

    async with StandIn(amqp_url, topology, ("pipeline_coordination",),
                       {"ListCollections": page}) as standin:
        first = await cli("collection", "list", "--pipeline", "p-1", "--limit", "1")
        second = await cli(*next_command(first.stdout))
        document = await cli("collection", "list", "--pipeline", "p-1", "--output", "json")
    assert "c-1" in first.stdout and "sweep" in first.stdout
    assert second.code == 0, second.stderr
    assert second.stdout.strip() == "no collections in Project demo on this page"
    sent = [m for m in standin.received if isinstance(m, pc.ListCollections)]
    assert (sent[1].pipeline_id, sent[1].page.page_size, sent[1].page.page_token) == ("p-1", 1, "c2")
    shown = json.loads(document.stdout)
    assert shown["next_page_token"] == "c2"
    assert [c["collection_id"] for c in shown["collections"]] == ["c-1"]
