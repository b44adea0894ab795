"""``metallo action run REPO ACTION``: PrepareAction (Workload Portfolio) then
LaunchRun (Execution Core), the same two requests the Go API sends (seed 004,
"2D Reliable Workload creation", §3B)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit, error_document
from metallo.cli.render import Output, as_dict, err, out, print_error, print_json
from metallo.cli.repository import repository_url
from metallo.cli.run_view import outcome_exit, print_end, run_error, run_summary, wait_run
from metallo.cli.settings import actor, connection
from metallo.cli.transport import Platform, command_metadata, derived_command_id
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp

app = typer.Typer(no_args_is_help=True, help="Actions of a repository's actions.yaml.")


@app.command("run")
def run_action(
    repo: Annotated[str, typer.Argument(help="repository: path, file:// or https:// URL")],
    action: Annotated[str, typer.Argument(help="action name in actions.yaml")],
    branch: Annotated[str, typer.Option("--branch", "-b", help="branch to read")] = "main",
    commit: Annotated[str, typer.Option(help="exact commit (40 hex) instead of the branch head")] = "",
    member: opt.Member = None, project: opt.Project = None,
    wait_end: opt.Wait = False, timeout: opt.WaitTimeout = None, quiet: opt.QuietRun = False,
    command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table,
) -> None:
    """Prepare ACTION at the branch head and launch a Run of that exact revision.

    Exit 0 when launched (or, with --wait, succeeded); 1 failed/cancelled; 2 refused;
    3 not found; 4 uncertain (retry with the printed --command-id).
    """
    who, conn = actor(member, project), connection()
    # One root id per invocation; each request's id derives from it, so a retry with
    # --command-id replays both requests and creates nothing twice.
    root_id = command_id or str(uuid.uuid4())
    prepare_id = derived_command_id(root_id, "prepare")
    launch_id = derived_command_id(root_id, "launch")
    url = repository_url(repo)  # after the options: a usage error is named first

    launched_run: list[str] = []  # set once the launch is known to be accepted

    async def body():
        async with Platform(conn) as p:
            prepared = await p.request(wp.PrepareAction(
                metadata=command_metadata(who, prepare_id), repository_url=url,
                branch=branch, commit=commit, action=action))
            if output is Output.table:
                verb = "created" if prepared.created else "reused"
                err.print(f"Workload {prepared.workload_id} revision {prepared.revision} ({verb}) "
                          f"at {prepared.commit[:12]}", markup=False, highlight=False)
            launched = await p.request(ec.LaunchRun(
                metadata=command_metadata(who, launch_id), workload_id=prepared.workload_id,
                revision=prepared.revision))
            launched_run.append(launched.run_id)
            if output is Output.table:
                err.print(f"Run {launched.run_id} {launched.phase}", markup=False, highlight=False)
            run = (await wait_run(p, who, launched.run_id, timeout=timeout, quiet=quiet)
                   if wait_end else None)
            return prepared, launched, run

    try:
        prepared, launched, run = asyncio.run(body())
    except CliError as error:
        if error.code == "outcome-uncertain" and launched_run:
            # The Run was accepted; only the wait was cut short (its own hint stands,
            # naming the Run): nothing is to be launched again.
            pass
        elif error.code == "outcome-uncertain":
            error.hint = (f"run the same command again with --command-id {root_id} (safe: the "
                          "platform returns the saved outcome)")
        elif error.code == "idempotency-conflict" and command_id:
            # The platform names the per-request id derived from --command-id.
            error.message = (f"--command-id {command_id} was already used for a different "
                             f"request ({error.message})")
        raise
    if output is Output.json:
        # Exit 1 (the waited-for Run did not succeed) carries {"error": …} as every failure does.
        failed = run_error(run) if run is not None else None
        print_json({"workload": as_dict(prepared), "launch": as_dict(launched),
                    "run": run_summary(run) if run is not None else None,
                    **(error_document(failed) if failed else {})})
        if failed is not None:
            print_error(failed)
    elif run is not None:
        print_end(run, quiet)
    else:
        out.print(launched.run_id)
    if run is not None:
        raise typer.Exit(outcome_exit(run.outcome))
    raise typer.Exit(Exit.OK)
