"""``metallo run show|list|wait|cancel|rerun|logs`` (Execution Core's GetRun, ListRuns,
CancelRun, RerunRun; docs/runs.md) and the shared Run waiting used by ``action run --wait``."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit, error_document
from metallo.cli.listing import Listing, page_request, print_page
from metallo.cli.render import (
    Output,
    as_dict,
    err,
    out,
    print_error,
    print_json,
    timestamp,
)
from metallo.cli.run_view import (
    MAX_LOG_BYTES,
    OUTCOMES,
    action_text,
    get_run,
    lost_hint,
    native_text,
    outcome_exit,
    print_end,
    print_run,
    run_error,
    run_summary,
    unknown_cancel_warning,
    wait_run,
)
from metallo.cli.settings import Actor, actor, connection
from metallo.cli.transport import Platform, command_metadata, query_metadata
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.waiting import waiting_text

app = typer.Typer(no_args_is_help=True, help="Runs: show, list, wait for, cancel, rerun, read logs.")

def _run(coro):
    return asyncio.run(coro)


@app.command("show")
def show(run_id: str, member: opt.Member = None, project: opt.Project = None,
         output: opt.OutputOpt = Output.table) -> None:
    """Show one Run: phase, native state, jobs, commits, Attempts."""
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await get_run(p, who, run_id)

    run = _run(body())
    if output is Output.json:
        print_json(run_summary(run))
    else:
        print_run(run)


@app.command("list")
def list_runs(member: opt.Member = None, project: opt.Project = None,
              output: opt.OutputOpt = Output.table,
              active: Annotated[bool, typer.Option("--active", help="only Runs not yet ended")] = False,
              outcome: Annotated[str | None, typer.Option(
                  help="succeeded | failed | cancelled | lost | timed-out")] = None,
              limit: Annotated[int, typer.Option(min=1, max=200, help="at most this many")] = 50,
              page_token: Annotated[str, typer.Option(help="from the previous page")] = "") -> None:
    """List the Project's Runs, newest first."""
    if outcome is not None and outcome not in OUTCOMES:
        raise CliError(f"--outcome {outcome!r} is not one of {', '.join(OUTCOMES)}",
                       "pass one of those", Exit.USAGE)
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await p.request(ec.ListRuns(
                metadata=query_metadata(who), active_only=active, outcome=outcome or "",
                page=page_request(limit, page_token)))

    reply = _run(body())
    which = "active Runs" if active else (f"{outcome} Runs" if outcome else "Runs")
    print_page(Listing("runs", f"Runs of {who.project}",
                       ("run", "action", "site", "phase", "native", "waiting", "outcome",
                        "accepted"),
                       f"no {which} in Project {who.project}", "metallo run list",
                       {"--project": who.project, "--active": active, "--outcome": outcome,
                        "--limit": limit}),
               reply.runs, row=_run_row, as_json=run_summary, page_token=page_token,
               next_token=reply.page.next_page_token, output=output)


def _run_row(r: ec.Run) -> tuple[str, ...]:
    """A Run's row of ``metallo run list``; an ended Run that did not succeed shows its
    reason with its outcome (a member's and a Site's cancellation differ)."""
    waits = waiting_text(r.waiting_reason, r.native_wait, r.native_state) if r.phase != "terminal" else ""
    outcome = r.outcome or ""
    if outcome and outcome != "succeeded" and r.reason_code:
        outcome = f"{outcome} ({r.reason_code})"
    return (r.run_id, action_text(r), r.site_id, r.phase, native_text(r),
            waits, outcome, timestamp(r.accepted_at))


@app.command("wait")
def wait(run_id: str, member: opt.Member = None, project: opt.Project = None,
         output: opt.OutputOpt = Output.table, timeout: opt.WaitTimeout = None,
         quiet: opt.QuietRun = False) -> None:
    """Wait for a Run to end, showing progress. Exit 0 succeeded, 1 failed/cancelled/lost/timed-out."""
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await wait_run(p, who, run_id, timeout=timeout, quiet=quiet)

    run = _run(body())
    if output is Output.json:
        failed = run_error(run)
        print_json({**run_summary(run), **(error_document(failed) if failed else {})})
        if failed is not None:
            print_error(failed)
    else:
        print_end(run, quiet)
    raise typer.Exit(outcome_exit(run.outcome))


@app.command("cancel")
def cancel(run_id: str, member: opt.Member = None, project: opt.Project = None,
           reason: Annotated[str, typer.Option(help="why, for people (≤ 500 characters)")] = "",
           command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table,
           wait_end: opt.Wait = False, timeout: opt.WaitTimeout = None,
           quiet: opt.QuietRun = False) -> None:
    """Ask a Run to stop. With --wait, wait until it has ended."""
    if len(reason) > 500:
        raise CliError("--reason is longer than 500 characters", "shorten it", Exit.USAGE)
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            reply = await p.request(ec.CancelRun(metadata=command_metadata(who, command_id),
                                                 run_id=run_id, reason=reason))
            # What the Site knows of the Attempt now: a stop may never reach its work.
            now = None
            if reply.outcome in ("", "lost"):
                try:
                    now = await get_run(p, who, run_id)
                except CliError:
                    now = None  # only a courtesy: the cancellation is recorded regardless
            run = await wait_run(p, who, run_id, timeout=timeout, quiet=quiet) if wait_end else None
            return reply, now, run

    reply, now, run = _run(body())
    caveat = "" if now is None else (
        unknown_cancel_warning(now) or (lost_hint(now) if now.outcome == "lost" else ""))
    if output is Output.json:
        print_json({"cancel": as_dict(reply), "run": run_summary(run) if run else None,
                    "warning": caveat})
    else:
        if reply.cancel_recorded:
            out.print(f"cancellation of {run_id} recorded (phase {reply.phase})")
        elif reply.outcome:
            out.print(f"{run_id} had already ended: {reply.outcome}")
        else:
            out.print(f"{run_id}: a cancellation was already recorded (phase {reply.phase})")
        if caveat:
            err.print(f"warning: {caveat}", markup=False, highlight=False)
        if run is not None:
            print_end(run, quiet)
    if run is not None:
        raise typer.Exit(Exit.OK if run.outcome in OUTCOMES else Exit.UNCERTAIN)


@app.command("rerun")
def rerun(run_id: str, member: opt.Member = None, project: opt.Project = None,
          command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table,
          wait_end: opt.Wait = False, timeout: opt.WaitTimeout = None,
          quiet: opt.QuietRun = False) -> None:
    """Start a new Run of the same Workload revision at the same commits (needs runs.rerun)."""
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            reply = await p.request(ec.RerunRun(metadata=command_metadata(who, command_id),
                                                run_id=run_id))
            run = await wait_run(p, who, reply.run_id, timeout=timeout, quiet=quiet) if wait_end else None
            return reply, run

    reply, run = _run(body())
    if output is Output.json:
        failed = run_error(run) if run is not None else None
        print_json({"rerun": as_dict(reply), "run": run_summary(run) if run else None,
                    **(error_document(failed) if failed else {})})
        if failed is not None:
            print_error(failed)
    else:
        commit = reply.repository_commit[:12] or "the revision's commit"
        out.print(f"Run {reply.run_id} reruns {reply.rerun_of} (revision {reply.revision}, "
                  f"at {commit}; phase {reply.phase})", markup=False, highlight=False)
        if run is not None:
            print_end(run, quiet)
    if run is not None:
        raise typer.Exit(outcome_exit(run.outcome))


STAGES = ("stage-in", "compute", "stage-out")


@app.command("logs")
def logs(run_id: str, member: opt.Member = None, project: opt.Project = None,
         stage: Annotated[str, typer.Option(help="stage-in | compute | stage-out")] = "compute",
         attempt: Annotated[int, typer.Option(min=0, help="Attempt number; 0 = the latest")] = 0,
         max_bytes: Annotated[int, typer.Option(min=1, max=MAX_LOG_BYTES,
                                                help="at most this many bytes (the tail)")] = MAX_LOG_BYTES,
         follow_log: Annotated[bool, typer.Option(
             "--follow", "-f", help="keep printing the log as it grows until the Run ends; "
             "exit as `run wait` does")] = False,
         command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table) -> None:
    """Print the tail of an Attempt's stage log (read through the Site, permit checked;
    at most 5 MiB, within 10 s), also while it runs; with --follow, keep printing what
    it writes until the Run has ended."""
    from metallo.cli import log_follow

    if stage not in STAGES:
        raise CliError(f"--stage {stage!r} is not one of {', '.join(STAGES)}",
                       "pass --stage compute (the action's own output)", Exit.USAGE)
    if follow_log and command_id:
        raise CliError("--command-id names one read; --follow makes many",
                       "drop --command-id (each read gets its own)", Exit.USAGE)
    who, conn = actor(member, project), connection()
    if follow_log:
        _follow(who, conn, run_id, stage=stage, attempt=attempt, max_bytes=max_bytes,
                output=output)
        return

    async def body():
        async with Platform(conn) as p:
            try:
                return await log_follow.read_once(p, who, run_id, attempt=attempt, stage=stage,
                                                  max_bytes=max_bytes, command_id=command_id)
            except CliError as refused:
                if refused.code == "not-found" and attempt:
                    refused.hint = (f"`metallo run show {run_id}` lists its Attempts; "
                                    "omit --attempt for the latest")
                elif refused.code == "not-found" and "has no Attempt" in refused.message:
                    refused.hint = (f"the Run has no Attempt yet (`metallo run show {run_id}` "
                                    f"says why); `metallo run logs {run_id} --follow` waits "
                                    "for it")
                raise

    read = _run(body())
    if read.state != "ready":
        raise log_follow.refusal(read, stage)
    if output is Output.json:
        print_json(as_dict(read))
        return
    import sys

    sys.stdout.write(read.text)
    if not read.text:
        # Not an error: a stage that never ran (an earlier one failed, or a cancel) or
        # wrote nothing has an empty log; say so rather than print nothing.
        err.print(f"(the {stage} log is empty: the stage did not run or wrote nothing; "
                  "`metallo run show RUN` shows which stages ran)", markup=False)
    if read.truncated:
        err.print(f"({log_follow.cut_remark(read)})", markup=False)


def _follow(who: Actor, conn, run_id: str, *, stage: str, attempt: int, max_bytes: int,
            output: Output) -> None:
    """``run logs --follow``: text as it arrives on stdout (``-o json``: one JSON line
    per piece, then ``{"run": …}``); remarks on stderr; exits as ``run wait``."""
    import json
    import sys

    from metallo.cli import log_follow

    def emit(read: ec.RunLogRead) -> None:
        if read.truncated and not read.HasField("requested_offset"):
            note(f"({log_follow.cut_remark(read)})")  # the first read: the log's tail
        if output is Output.json:
            sys.stdout.write(json.dumps({"attempt_number": read.attempt_number, "stage": stage,
                                         "offset": read.offset, "text": read.text}) + "\n")
        else:
            sys.stdout.write(read.text)
        sys.stdout.flush()

    def note(text: str) -> None:
        err.print(text, markup=False)

    async def body():
        async with Platform(conn) as p:
            return await log_follow.follow_log(p, who, run_id, stage=stage, attempt=attempt,
                                               max_bytes=max_bytes, emit=emit, note=note)

    resume = (f"`metallo run logs {run_id} --follow` shows the log's last --max-bytes "
              "and follows on")
    try:
        run = _run(body())
        if output is Output.json:
            sys.stdout.write(json.dumps({"run": run_summary(run)}) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        note(f"(stopped following; the Run goes on: {resume})")
        raise typer.Exit(Exit.UNCERTAIN) from None
    except BrokenPipeError:
        # The reader stopped reading (`| head`): nothing to say, and nowhere to say it.
        _quiet_stdout()
        raise typer.Exit(Exit.OK) from None
    if attempt:
        # --attempt N: that Attempt's own end decides, whatever the Run did after it.
        followed = next((a for a in run.attempts if a.number == attempt), None)
        state = followed.state if followed is not None else "ended"
        goes_on = "" if run.phase == "terminal" else f"; Run {run_id} goes on: phase {run.phase}"
        note(f"(Attempt {attempt} {state}{goes_on})")
        raise typer.Exit(Exit.OK if state == "succeeded" else Exit.FAILED)
    note(f"(Run {run_id} {run.outcome})")
    raise typer.Exit(outcome_exit(run.outcome))


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush into a closed pipe
    raises nothing more."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _register_reconcile() -> None:
    """``metallo run reconcile`` lives in its own module (operators' decisions)."""
    from metallo.cli import reconcile

    reconcile.register(app)


_register_reconcile()
