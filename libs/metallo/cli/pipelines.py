"""``metallo pipeline run|show|rerun|stop|list`` (Pipeline Coordination: StartPipeline,
GetPipeline, RerunPipeline, StopPipeline, ListPipelines; seed 004 §8A–8E; docs/pipelines.md)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit, error_document
from metallo.cli.listing import Listing, page_request, print_page
from metallo.cli.pipeline_graph import counts_text, graph_tree
from metallo.cli.pipeline_outcome import (  # noqa: F401 - current_step is part of this module's API
    TERMINAL,
    current_step,
    next_hint,
    pipeline_error,
    pipeline_exit,
    progress_label,
)
from metallo.cli.progress import Snapshot, follow, run_line
from metallo.cli.render import (
    Output,
    as_dict,
    err,
    key_value_table,
    out,
    print_error,
    print_json,
    print_list_table,
    timestamp,
)
from metallo.cli.repository import repository_url
from metallo.cli.settings import Actor, actor, connection
from metallo.cli.transport import Platform, command_metadata, query_metadata
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc_pb2

app = typer.Typer(no_args_is_help=True, help="Pipelines: run a branch's actions as a graph (needs, when).")

REPOSITORY_WIDTH = 40  # the list's repository column: the URL's tail, scheme left out

MaxActive = Annotated[int, typer.Option(
    "--max-active", min=0, max=50, help="steps running at once, at most (0 = the default 4)")]


def contract():
    """The generated ``metallo.pipeline_coordination.v1`` module."""
    return pc_pb2


async def get_pipeline(platform: Platform, who: Actor, pipeline_id: str):
    """GetPipeline (CliError exit 3 when it does not exist in the Project)."""
    pc = contract()
    return await platform.request(pc.GetPipeline(metadata=query_metadata(who),
                                                 pipeline_id=pipeline_id))


async def wait_pipeline(platform: Platform, who: Actor, pipeline_id: str, *,
                        timeout: float | None, quiet: bool):
    """Poll until the Pipeline ends, showing the current step's Run, or a collection step's
    children counts (a new line each time they change); the final Pipeline."""
    final: list = []

    async def poll() -> Snapshot:
        pipeline = await get_pipeline(platform, who, pipeline_id)
        final[:] = [pipeline]
        done = pipeline.state in TERMINAL
        step = current_step(pipeline)
        if step is None:
            return Snapshot(f"pipeline {pipeline_id} · {pipeline.state}", done)
        label = progress_label(pipeline, step)
        if step.run_id and not done:
            run = await platform.request(ec.GetRun(metadata=query_metadata(who), run_id=step.run_id))
            return Snapshot(run_line(run, label), done)
        return Snapshot(label, done)

    await follow(poll, timeout=timeout, quiet=quiet, what=f"Pipeline {pipeline_id}",
                 resume=f"metallo pipeline show {pipeline_id} --wait")
    return final[0]


def print_pipeline(p, *, hint: bool = True) -> None:
    """A Pipeline as a table, then its step graph, then its steps; with ``hint``, the next
    step after it failed or was stopped (:func:`next_hint`) on stderr."""
    out.print(key_value_table(f"Pipeline {p.pipeline_id}", [
        ("steps", counts_text(p)), ("max active", p.max_active or ""), ("rerun of", p.rerun_of),
        ("project", p.project), ("repository", p.repository_url), ("branch", p.branch),
        ("state", p.state), ("desired", p.desired_state), ("graph commit", graph_commit_text(p)),
        ("failed step", p.failed_step or ""), ("reason", p.reason_code), ("message", p.message),
        ("initiated by", p.initiating_member), ("created", timestamp(p.created_at)),
        ("ended", timestamp(p.ended_at)), ("stopped by", p.stopped_by),
        ("stop reason", p.stop_reason),
    ]))
    if len(p.steps):
        from rich.table import Table

        table = Table(title="Steps", title_justify="left")
        for column in ("#", "action", "needs", "when", "state", "run", "input", "output", "reason"):
            table.add_column(column)
        for s in p.steps:
            table.add_row(str(s.index), s.action, ",".join(map(str, s.needs)), s.when, s.state,
                          s.run_id or step_collection_text(s), s.pinned_commit[:12], s.output_commit[:12],
                          s.reason_code)
        out.print(graph_tree(p))
        print_list_table(table)
    then = next_hint(p) if hint else ""
    if then:
        err.print(f"next: {then}", markup=False, highlight=False)


def graph_commit_text(p) -> str:
    """The commit the Pipeline's graph (actions.yaml) was read at; a rerun's says it is the
    original's graph and that each step runs at its own input commit."""
    if p.rerun_of and p.prepared_commit:
        return f"{p.prepared_commit} (graph of {p.rerun_of}; each step runs at its input commit)"
    return p.prepared_commit


def carried_collections(p) -> list[dict]:
    """Each collection step of a rerun that kept some children: ``{step, action, collection_id,
    total, carried, run_again}``."""
    return [{"step": s.index, "action": s.action, "collection_id": s.collection_id,
             "total": s.collection_counts.total, "carried": s.collection_counts.carried,
             "run_again": s.collection_counts.total - s.collection_counts.carried}
            for s in p.steps if s.collection_id and not s.carried_from and s.collection_counts.carried]


def carried_lines(p) -> list[str]:
    """One line per collection step of a rerun that kept some children: how many run again."""
    return [f"step {c['step']} ({c['action']}): {c['run_again']} of {c['total']} children run again, "
            f"{c['carried']} carried over (`metallo collection show {c['collection_id']}`)"
            for c in carried_collections(p)]


def step_collection_text(s) -> str:
    """A collection step's run column: ``collection ID (3/20 succeeded)``, with ``, 2 carried over`` in a
    rerun that kept children; "" for another step."""
    if not s.collection_id:
        return ""
    c = s.collection_counts
    carried = f", {c.carried} carried over" if c.carried else ""
    return f"collection {s.collection_id} ({c.succeeded}/{c.total} succeeded{carried})"


def rerun_steps_text(steps) -> str:
    """``step 1 runs again`` / ``steps 1, 3 run again`` for a rerun's step indices."""
    if not len(steps):
        return "no step runs again"
    if len(steps) == 1:
        return f"step {steps[0]} runs again"
    return f"steps {', '.join(map(str, steps))} run again"


def repository_text(url: str, width: int = REPOSITORY_WIDTH) -> str:
    """``url`` for a list column: without its scheme, and when still longer than ``width``
    its last ``width - 1`` characters after ``…`` (the repository's name is at the end)."""
    text = url.split("://", 1)[-1]
    return text if len(text) <= width else "…" + text[-(width - 1):]


@app.command("run")
def run_pipeline(
    repo: Annotated[str, typer.Argument(help="repository: path, file:// or https:// URL")],
    branch: Annotated[str, typer.Option("--branch", "-b", help="branch whose actions run")] = "main",
    action: Annotated[list[str] | None, typer.Option(
        "--action", "-a", help="run only these actions (repeatable); their needs must be listed too")] = None,
    max_active: MaxActive = 0,
    member: opt.Member = None, project: opt.Project = None,
    wait_end: opt.Wait = False, timeout: opt.WaitTimeout = None, quiet: opt.Quiet = False,
    command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table,
) -> None:
    """Start a Pipeline: every action of the branch, as its needs say (without needs: in file order)."""
    pc = contract()
    who, conn = actor(member, project), connection()
    url = repository_url(repo)
    cid = command_id or str(uuid.uuid4())

    async def body():
        async with Platform(conn) as p:
            started = await p.request(pc.StartPipeline(
                metadata=command_metadata(who, cid), repository_url=url, branch=branch,
                actions=action or [], max_active=max_active))
            return await started_then_waited(p, who, started, wait_end=wait_end, timeout=timeout,
                                             quiet=quiet, output=output)

    started, final, wait_failed = asyncio.run(body())
    finish_started(started, final, wait_failed, output)


async def started_then_waited(p: Platform, who: Actor, started, *, wait_end: bool, timeout, quiet: bool,
                              output: Output):
    """After StartPipeline/RerunPipeline: say so, and with --wait follow the Pipeline to its end.

    Returns (reply, final Pipeline or None, CliError of a failed wait or None).
    """
    if output is Output.table:
        err.print(f"Pipeline {started.pipeline_id} {started.state}", markup=False, highlight=False)
    if not wait_end:
        return started, None, None
    try:
        final = await wait_pipeline(p, who, started.pipeline_id, timeout=timeout, quiet=quiet)
    except CliError as failed:  # started, then the wait failed (timeout, no reply)
        return started, None, failed
    return started, final, None


def finish_started(started, final, wait_failed: CliError | None, output: Output, *,
                   start: dict | None = None) -> None:
    """Print the started (and maybe ended) Pipeline and exit as :func:`pipeline_exit` says;
    ``start`` is the JSON ``start`` document (default: the reply's fields)."""
    start = start if start is not None else as_dict(started)
    if wait_failed is not None:
        if output is not Output.json:
            raise wait_failed
        # Keep the started Pipeline's id in the one JSON document, beside the error.
        print_error(wait_failed)
        print_json({"start": start, "pipeline": None, **error_document(wait_failed)})
        raise typer.Exit(wait_failed.exit_code)
    failed = pipeline_error(final) if final is not None else None
    if output is Output.json:
        # The keys scripts already read, plus {"error": …} whenever the exit is not 0.
        print_json({"start": start, "pipeline": as_dict(final) if final else None,
                    **(error_document(failed) if failed else {})})
    elif final is not None:
        print_pipeline(final, hint=failed is None)
    else:
        out.print(started.pipeline_id)
    if failed is not None:
        print_error(failed)
    raise typer.Exit(pipeline_exit(final) if final is not None else Exit.OK)


@app.command("rerun")
def rerun(
    pipeline_id: str,
    failed: Annotated[bool, typer.Option(
        "--failed", help="rerun only the failed, cancelled and skipped steps (of a collection, only the children "
                    "that did not succeed); keep what succeeded")] = False,
    max_active: MaxActive = 0,
    member: opt.Member = None, project: opt.Project = None,
    wait_end: opt.Wait = False, timeout: opt.WaitTimeout = None, quiet: opt.Quiet = False,
    command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table,
) -> None:
    """Start a new Pipeline with the same graph as an ended one (with --failed: only what did not succeed)."""
    pc = contract()
    who, conn = actor(member, project), connection()
    cid = command_id or str(uuid.uuid4())

    async def body():
        async with Platform(conn) as p:
            started = await p.request(pc.RerunPipeline(
                metadata=command_metadata(who, cid), pipeline_id=pipeline_id, failed_only=failed,
                max_active=max_active))
            new = await get_pipeline(p, who, started.pipeline_id)
            if output is Output.table:
                err.print(f"rerun of {started.rerun_of}: {rerun_steps_text(started.rerun_steps)}",
                          markup=False, highlight=False)
                for line in carried_lines(new):
                    err.print(line, markup=False, highlight=False)
            return (*await started_then_waited(p, who, started, wait_end=wait_end, timeout=timeout,
                                               quiet=quiet, output=output), carried_collections(new))

    started, final, wait_failed, carried = asyncio.run(body())
    # The start document carries what the text output says: the steps and children run again.
    finish_started(started, final, wait_failed, output,
                   start={**as_dict(started), "carried_collections": carried})


@app.command("show")
def show(pipeline_id: str, member: opt.Member = None, project: opt.Project = None,
         output: opt.OutputOpt = Output.table,
         wait_end: opt.Wait = False, timeout: opt.WaitTimeout = None, quiet: opt.Quiet = False) -> None:
    """Show a Pipeline and its steps (with --wait: wait until it ends)."""
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            if wait_end:
                return await wait_pipeline(p, who, pipeline_id, timeout=timeout, quiet=quiet)
            return await get_pipeline(p, who, pipeline_id)

    pipeline = asyncio.run(body())
    # Only a wait exits with the Pipeline's outcome: a plain read that found it succeeded.
    failed = pipeline_error(pipeline) if wait_end else None
    if output is Output.json:
        print_json({**as_dict(pipeline), **(error_document(failed) if failed else {})})
    else:
        print_pipeline(pipeline, hint=failed is None)
    if failed is not None:
        print_error(failed)
    if wait_end:
        raise typer.Exit(pipeline_exit(pipeline))


@app.command("stop")
def stop(pipeline_id: str, member: opt.Member = None, project: opt.Project = None,
         reason: Annotated[str, typer.Option(help="why, for people (≤ 500 characters)")] = "",
         command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table) -> None:
    """Stop a Pipeline: launch no further step and cancel its running Runs."""
    if len(reason) > 500:
        raise CliError("--reason is longer than 500 characters", "shorten it", Exit.USAGE)
    pc = contract()
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await p.request(pc.StopPipeline(metadata=command_metadata(who, command_id),
                                                   pipeline_id=pipeline_id, reason=reason))

    reply = asyncio.run(body())
    if output is Output.json:
        print_json(as_dict(reply))
    elif reply.stop_recorded:
        out.print(f"stop of {pipeline_id} recorded (state {reply.state})")
    else:
        out.print(f"{pipeline_id}: already stopping or ended (state {reply.state})")


@app.command("list")
def list_pipelines(member: opt.Member = None, project: opt.Project = None,
                   output: opt.OutputOpt = Output.table,
                   state: Annotated[str, typer.Option(help="only Pipelines in this state")] = "",
                   limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
                   page_token: Annotated[str, typer.Option(help="from the previous page")] = "") -> None:
    """List the Project's Pipelines, newest first."""
    pc = contract()
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await p.request(pc.ListPipelines(
                metadata=query_metadata(who), state=state, page=page_request(limit, page_token)))

    reply = asyncio.run(body())
    print_page(Listing("pipelines", f"Pipelines of {who.project}",
                       ("pipeline", "repository", "branch", "state", "reason", "steps", "created"),
                       f"no Pipelines in Project {who.project}", "metallo pipeline list",
                       {"--project": who.project, "--state": state, "--limit": limit}),
               reply.pipelines, row=_pipeline_row, as_json=as_dict, page_token=page_token,
               next_token=reply.page.next_page_token, output=output)


def _pipeline_row(p) -> tuple[str, ...]:
    """A Pipeline's row of ``metallo pipeline list``."""
    return (p.pipeline_id, repository_text(p.repository_url), p.branch, p.state, p.reason_code,
            ", ".join(f"{s.action}:{s.state}" for s in p.steps), timestamp(p.created_at))
