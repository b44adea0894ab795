"""``metallo collection show|list|cancel`` (Pipeline Coordination: GetCollection,
ListCollections, CancelCollection; docs/pipelines.md, Collections)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit
from metallo.cli.listing import Listing, page_request, print_page
from metallo.cli.render import (
    Output,
    as_dict,
    key_value_table,
    out,
    print_json,
    print_list_table,
    timestamp,
)
from metallo.cli.settings import actor, connection
from metallo.cli.transport import Platform, command_metadata, query_metadata
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc

app = typer.Typer(no_args_is_help=True,
                  help="Collections: one action run once per matrix combination or parameter record.")

COUNTS = ("total", "waiting", "active", "succeeded", "failed", "cancelled", "uncertain", "carried")


NOT_FOUND_HINT = ("check the collection id and --project; `metallo collection list` shows the Project's "
                  "collections (`--pipeline PIPELINE` those of one Pipeline)")


async def collection_request(p: Platform, message):
    """Send a collection request; a not-found refusal's hint names ``metallo collection list``
    (the generic one names Runs and Pipelines, which are not what was asked for)."""
    try:
        return await p.request(message)
    except CliError as refused:
        if refused.exit_code is Exit.NOT_FOUND:
            refused.hint = NOT_FOUND_HINT
        raise


def counts_text(counts) -> str:
    """``20 total · 3 active · 17 succeeded`` (zero counts left out, total always shown)."""
    return " · ".join(f"{getattr(counts, k)} {k}" for k in COUNTS if k == "total" or getattr(counts, k))


def values_text(parameters) -> str:
    """``lr=0.1 seed=3`` in name order."""
    return " ".join(f"{k}={v}" for k, v in sorted(parameters.items()))


def carried_text(c) -> str:
    """``6 carried over from PIPELINE (kept Runs); 14 run again`` for a rerun's collection, else ""."""
    carried = [i for i in c.items if i.carried_from]
    if not carried:
        return ""
    sources = ", ".join(sorted({i.carried_from for i in carried}))
    return f"{len(carried)} carried over from {sources} (their Runs are kept); {len(c.items) - len(carried)} run again"


def child_state(i) -> str:
    """A child's state, ``succeeded (carried)`` for one a rerun carried over."""
    return f"{i.state} (carried)" if i.carried_from else i.state


def print_collection(c) -> None:
    """A collection as a table, then one row per child (a carried child names the Pipeline whose Run it is)."""
    out.print(key_value_table(f"Collection {c.collection_id}", [
        ("children", counts_text(c.counts)), ("rerun", carried_text(c)), ("state", c.state), ("action", c.action),
        ("pipeline", f"{c.pipeline_id} step {c.step_index}"), ("revision", c.revision or ""),
        ("commit", c.pinned_commit), ("max active", c.max_active), ("fail fast", "yes" if c.fail_fast else "no"),
        ("array", f"{c.array} ({c.array_decision})" if c.array_decision else c.array),
        ("reason", c.reason_code), ("message", c.message), ("cancelled by", c.cancelled_by),
        ("cancel reason", c.cancel_reason),
    ]))
    from rich.table import Table

    table = Table(title="Children", title_justify="left")
    for column in ("#", "parameters", "state", "run", "from", "revision", "commit", "reason", "started", "ended"):
        table.add_column(column)
    for i in c.items:
        table.add_row(str(i.index), values_text(i.parameters), child_state(i), i.run_id, i.carried_from,
                      str(i.revision or ""), i.pinned_commit[:12], i.reason_code, timestamp(i.started_at),
                      timestamp(i.ended_at))
    print_list_table(table, empty="no child yet: the step has not started")
    older = older_pins_text(c)
    if older:
        out.print(older, markup=False, highlight=False)


def older_pins_text(c) -> str:
    """A note when carried children ran at another revision or commit than the collection's
    (each child's own is in its row), else ""."""
    other = [i for i in c.items if i.carried_from and i.pinned_commit
             and (i.pinned_commit, i.revision) != (c.pinned_commit, c.revision)]
    if not other:
        return ""
    return (f"note: {len(other)} carried children ran at an older commit or revision than this collection's "
            f"({', '.join(str(i.index) for i in other[:10])}{', …' if len(other) > 10 else ''}); "
            "each row shows its own")


@app.command("show")
def show(collection_id: str, member: opt.Member = None, project: opt.Project = None,
         output: opt.OutputOpt = Output.table) -> None:
    """Show a collection, its counts and every child (each child's Run: `metallo run show RUN`)."""
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await collection_request(p, pc.GetCollection(metadata=query_metadata(who),
                                                                collection_id=collection_id))

    c = asyncio.run(body())
    if output is Output.json:
        print_json(as_dict(c))
    else:
        print_collection(c)


@app.command("list")
def list_collections(member: opt.Member = None, project: opt.Project = None,
                     output: opt.OutputOpt = Output.table,
                     pipeline: Annotated[str, typer.Option(help="only this Pipeline's collections")] = "",
                     limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
                     page_token: Annotated[str, typer.Option(help="from the previous page")] = "") -> None:
    """List the Project's collections, newest Pipeline first."""
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await p.request(pc.ListCollections(
                metadata=query_metadata(who), pipeline_id=pipeline,
                page=page_request(limit, page_token)))

    reply = asyncio.run(body())
    print_page(Listing("collections", f"Collections of {who.project}",
                       ("collection", "pipeline", "step", "action", "state", "children"),
                       f"no collections in Project {who.project}", "metallo collection list",
                       {"--project": who.project, "--pipeline": pipeline, "--limit": limit}),
               reply.collections, row=_collection_row, as_json=as_dict, page_token=page_token,
               next_token=reply.page.next_page_token, output=output)


def _collection_row(c) -> tuple[str, ...]:
    """A collection's row of ``metallo collection list``."""
    return (c.collection_id, c.pipeline_id, str(c.step_index), c.action, c.state,
            counts_text(c.counts))


@app.command("cancel")
def cancel(collection_id: str, member: opt.Member = None, project: opt.Project = None,
           reason: Annotated[str, typer.Option(help="why, for people (≤ 500 characters)")] = "",
           command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table) -> None:
    """Cancel a whole collection: launch no further child and cancel the running ones."""
    if len(reason) > 500:
        raise CliError("--reason is longer than 500 characters", "shorten it", Exit.USAGE)
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await collection_request(p, pc.CancelCollection(
                metadata=command_metadata(who, command_id), collection_id=collection_id, reason=reason))

    reply = asyncio.run(body())
    if output is Output.json:
        print_json(as_dict(reply))
    elif reply.cancel_recorded:
        out.print(f"cancel of collection {collection_id} recorded (state {reply.state})")
    else:
        out.print(f"{collection_id}: already cancelled or ended (state {reply.state})")
