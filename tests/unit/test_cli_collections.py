"""``metallo collection show|list|cancel``: tables and --output json, against the real RabbitMQ
with a stand-in for Pipeline Coordination (tests/unit/cli_support.py)."""

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

CID = "2c4e6a8b-3333-5444-9555-a66677778888"
PID = "0b3f1c9a-1111-4222-8333-944455556666"
OWNERS = ("pipeline_coordination",)


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def collection() -> pc.Collection:
    c = pc.Collection(collection_id=CID, project="demo", pipeline_id=PID, step_index=1, action="sweep",
                      state="running", max_active=3, fail_fast=True, array="prefer",
                      array_decision="individual: this platform does not compile Slurm job arrays yet",
                      counts=pc.CollectionCounts(total=3, active=1, succeeded=1, waiting=1))
    c.items.add(index=1, parameters={"lr": "0.1", "seed": "1"}, state="succeeded", run_id="run-1")
    c.items.add(index=2, parameters={"lr": "0.1", "seed": "2"}, state="launched", run_id="run-2")
    c.items.add(index=3, parameters={"lr": "0.1", "seed": "3"}, state="waiting")
    return c


async def test_show_list_and_cancel_in_tables_and_json(amqp_url, topology):
    seen = []

    def cancel(cmd):
        seen.append(cmd)
        return pc.CancelCollectionReply(collection_id=cmd.collection_id, cancel_recorded=True, state="cancelling")

    def listed(q):
        seen.append(q)
        short = collection()
        del short.items[:]
        return pc.ListCollectionsReply(collections=[short])

    handlers = {"GetCollection": lambda q: collection(), "ListCollections": listed, "CancelCollection": cancel}
    async with StandIn(amqp_url, topology, OWNERS, handlers):
        table = await cli("collection", "show", CID)
        document = await cli("collection", "show", CID, "--output", "json")
        listing = await cli("collection", "list", "--pipeline", PID, "-o", "json")
        cancelled = await cli("collection", "cancel", CID, "--reason", "wrong data")

    assert table.code == 0, table.stderr
    assert "3 total · 1 waiting · 1 active · 1 succeeded" in table.stdout
    assert "lr=0.1 seed=2" in table.stdout and "run-2" in table.stdout
    shown = json.loads(document.stdout)
    assert shown["counts"]["total"] == 3 and shown["items"][1]["parameters"] == {"lr": "0.1", "seed": "2"}
    assert json.loads(listing.stdout)["collections"][0]["collection_id"] == CID
    assert cancelled.code == 0 and "cancel of collection" in cancelled.stdout
    list_query, cancel_command = seen
    assert list_query.pipeline_id == PID
    assert cancel_command.collection_id == CID and cancel_command.reason == "wrong data"


async def test_cancel_refuses_a_long_reason_before_asking(amqp_url, topology):
    async with StandIn(amqp_url, topology, OWNERS, {}):
        done = await cli("collection", "cancel", CID, "--reason", "x" * 501)
    assert done.code == 2 and "longer than 500" in done.stderr


def test_a_collection_step_names_its_collection_in_the_pipeline_table():
    from metallo.cli.pipelines import step_collection_text

    step = pc.PipelineStep(index=1, action="sweep", collection_id=CID,
                           collection_counts=pc.CollectionCounts(total=20, succeeded=3))
    assert step_collection_text(step) == f"collection {CID} (3/20 succeeded)"
    assert step_collection_text(pc.PipelineStep(index=2, action="report")) == ""


async def test_a_rerun_collection_shows_which_children_were_carried_over_and_which_run_again(amqp_url, topology):
    old = "9a9a9a9a-1111-4222-8333-944455556666"

    def rerun_collection(q):
        c = collection()
        c.counts.carried = 1
        c.items[0].carried_from = old
        return c

    async with StandIn(amqp_url, topology, OWNERS, {"GetCollection": rerun_collection}):
        table = await cli("collection", "show", CID)
        document = await cli("collection", "show", CID, "-o", "json")
    assert table.code == 0, table.stderr
    assert f"1 carried over from {old} (their Runs are kept); 2 run again" in table.stdout
    assert "succeeded (carried)" in table.stdout and "1 carried" in table.stdout
    shown = json.loads(document.stdout)
    assert [i["carried_from"] for i in shown["items"]] == [old, "", ""] and shown["counts"]["carried"] == 1


def test_a_rerun_collection_step_says_how_many_children_it_kept():
    from rich.console import Console

    from metallo.cli.pipeline_graph import graph_tree
    from metallo.cli.pipelines import step_collection_text

    counts = pc.CollectionCounts(total=20, succeeded=6, carried=6, waiting=14)
    step = pc.PipelineStep(index=1, action="sweep", collection_id=CID, collection_counts=counts)
    assert step_collection_text(step) == f"collection {CID} (6/20 succeeded, 6 carried over)"
    p = pc.Pipeline(pipeline_id=PID, state="running", steps=[step])
    console = Console(width=120, record=True)
    console.print(graph_tree(p))
    assert "6 of 20 children kept, 14 rerun" in console.export_text()


def test_carried_children_show_the_commit_their_own_run_ran():
    from metallo.cli.collection import older_pins_text

    c = pc.Collection(collection_id=CID, pipeline_id=PID, revision=5, pinned_commit="f" * 40)
    c.items.add(index=1, state="succeeded", carried_from="p-old", revision=4, pinned_commit="a" * 40)
    c.items.add(index=2, state="succeeded", carried_from="p-old", revision=5, pinned_commit="f" * 40)
    c.items.add(index=3, state="launched", revision=5, pinned_commit="f" * 40)
    assert older_pins_text(c) == ("note: 1 carried children ran at an older commit or revision than this "
                                  "collection's (1); each row shows its own")
    del c.items[0]
    assert older_pins_text(c) == ""


async def test_show_table_has_each_childs_commit(amqp_url, topology):
    def rerun_collection(_q):
        c = collection()
        c.pinned_commit, c.revision = "f" * 40, 5
        c.items[0].carried_from, c.items[0].revision, c.items[0].pinned_commit = "p-old", 4, "a" * 40
        for i in c.items[1:]:
            i.revision, i.pinned_commit = 5, "f" * 40
        return c

    async with StandIn(amqp_url, topology, OWNERS, {"GetCollection": rerun_collection}):
        table = await cli("collection", "show", CID)
        document = await cli("collection", "show", CID, "--output", "json")
    assert table.code == 0, table.stderr
    assert "aaaaaaaaaaaa" in table.stdout and "ffffffffffff" in table.stdout
    assert "1 carried children ran at an older commit" in table.stdout
    items = json.loads(document.stdout)["items"]
    assert (items[0]["pinned_commit"], items[0]["revision"]) == ("a" * 40, 4)
