"""``metallo repo branches REPO`` (Workload Portfolio's ListBranches) and the refusals
that point at it or at ``--project``, against the real broker with a stand-in owner
(tests/unit/cli_support.py)."""

from __future__ import annotations

import json

import pytest

from metallo.messaging import Rejected, Topology
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
)

REPO = "https://127.0.0.1:8443/git/demo.git"
TIP = "c0ffee" + "0" * 34


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def listed(_query: wp.ListBranches) -> wp.ListBranchesReply:
    return wp.ListBranchesReply(branches=[wp.Branch(name="dev", commit="d" * 40),
                                          wp.Branch(name="main", commit=TIP)],
                                default_branch="main")


async def test_branches_are_listed_with_the_default_marked(amqp_url, topology):
    async with StandIn(amqp_url, topology, ("workload_portfolio",),
                       {"ListBranches": listed}) as standin:
        table = await cli("repo", "branches", REPO)
        as_json = await cli("repo", "branches", REPO, "-o", "json")
    assert table.code == 0, table.stderr
    cells = [[w for w in line.split() if w.strip("│┃|")] for line in table.stdout.splitlines()]
    rows = [row for row in cells if row and row[0] in ("dev", "main")]
    assert rows == [["dev", "d" * 12], ["main", TIP[:12], "default"]]
    document = json.loads(as_json.stdout)
    assert [b["name"] for b in document["branches"]] == ["dev", "main"]
    assert document["default_branch"] == "main" and document["truncated"] is False
    sent = standin.received[0]
    assert isinstance(sent, wp.ListBranches)
    assert (sent.repository_url, sent.metadata.project, sent.metadata.acting_member) == (
        REPO, "demo", "m-alice")


async def test_a_missing_repository_exits_3(amqp_url, topology):
    def missing(_q):
        raise Rejected("repository-not-found", f"repository {REPO} not found or not accessible")

    async with StandIn(amqp_url, topology, ("workload_portfolio",), {"ListBranches": missing}):
        done = await cli("repo", "branches", REPO)
    assert done.code == 3 and "repository-not-found" in done.stderr


async def test_a_missing_branch_names_the_command_that_lists_the_branches(amqp_url, topology):
    def no_branch(_c):
        raise Rejected("branch-not-found", f"branch 'nob' not found in {REPO}")

    async with StandIn(amqp_url, topology, ("workload_portfolio",), {"PrepareAction": no_branch}):
        done = await cli("action", "run", REPO, "train", "--branch", "nob", "-o", "json")
    error = json.loads(done.stdout)["error"]
    assert done.code == 3 and error["code"] == "branch-not-found"
    assert f"`metallo repo branches {REPO}` lists the branches" in error["hint"]
    assert "ls-remote" not in error["hint"]


async def test_an_unknown_project_exits_3_and_points_at_project(amqp_url, topology):
    def unknown(_q):
        raise Rejected("project-not-found", "Project nope is unknown to the Project authority")

    async with StandIn(amqp_url, topology, ("execution_core",), {"ListRuns": unknown}):
        done = await cli("run", "list", "--project", "nope", "-o", "json")
    error = json.loads(done.stdout)["error"]
    assert done.code == 3 and error["code"] == "project-not-found"
    assert "Project nope is unknown" in error["message"]
    assert "--project" in error["hint"] and "permission" not in error["hint"]
