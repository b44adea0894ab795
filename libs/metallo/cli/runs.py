"""``metallo run show|list|wait|cancel|rerun|logs`` (Execution Core's GetRun, ListRuns,
CancelRun, RerunRun; docs/runs.md) and the shared Run waiting used by ``action run --wait``."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit
from metallo.cli.progress import Snapshot, follow, run_line
from metallo.cli.render import (
    Output,
    as_dict,
    err,
    key_value_table,
    native_jobs_text,
    out,
    print_json,
    print_list_table,
    seconds_between,
    timestamp,
)
from metallo.cli.settings import Actor, actor, connection
from metallo.cli.transport import Platform, command_metadata, query_metadata
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.waiting import waiting_text

app = typer.Typer(no_args_is_help=True, help="Runs: show, list, wait for, cancel, rerun, read logs.")

OUTCOME_EXIT = {"succeeded": Exit.OK, "failed": Exit.FAILED, "cancelled": Exit.FAILED,
                "lost": Exit.FAILED, "timed-out": Exit.FAILED}
OUTCOMES = tuple(OUTCOME_EXIT)
MAX_LOG_BYTES = 5 * 1024 * 1024  # seed 001, Private Run log commands: 5 MiB upload cap


def outcome_exit(outcome: str) -> Exit:
    """0 for succeeded, 1 for failed, cancelled, lost or timed-out (exits.py)."""
    return OUTCOME_EXIT.get(outcome, Exit.UNCERTAIN)


async def get_run(platform: Platform, who: Actor, run_id: str) -> ec.Run:
    """GetRun; CliError exit 3 when the Run does not exist in the Project."""
    return await platform.request(ec.GetRun(metadata=query_metadata(who), run_id=run_id))


async def wait_run(platform: Platform, who: Actor, run_id: str, *, timeout: float | None,
                   quiet: bool, step: str = "") -> ec.Run:
    """Poll the Run until it is terminal, showing progress; the final Run."""
    final: list[ec.Run] = []

    async def poll() -> Snapshot:
        run = await get_run(platform, who, run_id)
        final[:] = [run]
        return Snapshot(run_line(run, step), run.phase == "terminal")

    await follow(poll, timeout=timeout, quiet=quiet, what=f"Run {run_id}",
                 resume=f"metallo run wait {run_id}")
    return final[0]


def run_summary(run: ec.Run) -> dict:
    """The JSON shape of a Run for scripts: every field of the contract message."""
    return as_dict(run)



def _observation_text(phase: str, confidence: str) -> str:
    """The observed phase, with how far to trust it when that is not plain
    (docs/runs.md: ``stale`` — the Site has not reported for a while; ``uncertain``)."""
    if confidence in ("stale", "uncertain"):
        hint = "the Site has not reported lately" if confidence == "stale" else "the Site could not tell"
        return f"{phase} ({confidence}: {hint})" if phase else f"({confidence}: {hint})"
    return phase

def print_run(run: ec.Run) -> None:
    """A Run as a table, then its Attempts."""
    attempt = run.attempts[-1] if len(run.attempts) else None
    elapsed = seconds_between(run.accepted_at, run.ended_at)
    out.print(key_value_table(f"Run {run.run_id}", [
        ("project", run.project), ("action", run.action), ("action type", run.action_type),
        ("workload", f"{run.workload_id} r{run.revision}"), ("site", run.site_id),
        ("phase", run.phase), ("desired", run.desired_state),
        ("native state", f"{run.native_stage} {run.native_state}".strip()
         if run.native_state else ""),
        ("waiting", waiting_text(run.waiting_reason, run.native_wait, run.native_state)
         if run.phase != "terminal" else ""),
        ("observation", _observation_text(run.observation_phase, run.observation_confidence)),
        ("outcome", run.outcome), ("reason", run.reason_code), ("why", run.reason_message),
        ("native jobs", native_jobs_text(attempt.native_jobs) if attempt else ""),
        ("input", ", ".join(f"{r.role} {r.url}@{r.commit[:12]}" for r in run.repositories)),
        ("output commit", run.output_commit), ("endpoint", run.endpoint),
        ("initiated by", run.initiating_member), ("accepted", timestamp(run.accepted_at)),
        ("ended", timestamp(run.ended_at)),
        ("elapsed", f"{elapsed:.1f} s" if elapsed is not None else ""),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(run.labels.items()))),
        ("cancel reason", run.cancel_reason), ("rerun of", run.rerun_of),
    ]))
    if len(run.attempts):
        from rich.table import Table

        table = Table(title="Attempts", title_justify="left")
        for column in ("#", "state", "native", "jobs", "exit", "reason"):
            table.add_column(column)
        for a in run.attempts:
            exit_text = ""
            if a.exit.HasField("exit_code"):
                exit_text = f"code {a.exit.exit_code}"
            if a.exit.HasField("signal"):
                exit_text += f" signal {a.exit.signal}"
            if a.exit.failure_stage:
                exit_text += f" at {a.exit.failure_stage}"
            table.add_row(str(a.number), a.state, a.native_state, native_jobs_text(a.native_jobs),
                          exit_text.strip(), a.reason_code)
        print_list_table(table)
    if run.outcome == "failed" and len(run.attempts):
        stage = run.attempts[-1].exit.failure_stage or "compute"
        err.print(f"next: `metallo run logs {run.run_id} --stage {stage}` shows what it wrote",
                  markup=False)
    elif run.outcome == "lost":
        err.print("next: the Site no longer knew its Attempt, so nothing says whether the work "
                  "ran; check at the Site before launching it again", markup=False)


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
    from metallo.common.v1 import common_pb2

    async def body():
        async with Platform(conn) as p:
            return await p.request(ec.ListRuns(
                metadata=query_metadata(who), active_only=active, outcome=outcome or "",
                page=common_pb2.PageRequest(page_size=limit, page_token=page_token)))

    reply = _run(body())
    if output is Output.json:
        print_json({"runs": [run_summary(r) for r in reply.runs],
                    "next_page_token": reply.page.next_page_token})
        return
    from rich.table import Table

    table = Table(title=f"Runs of {who.project}", title_justify="left")
    for column in ("run", "action", "site", "phase", "native", "waiting", "outcome", "accepted"):
        table.add_column(column)
    for r in reply.runs:
        waits = waiting_text(r.waiting_reason, r.native_wait, r.native_state) if r.phase != "terminal" else ""
        table.add_row(r.run_id, r.action, r.site_id, r.phase,
                      f"{r.native_stage} {r.native_state}".strip() if r.native_state else "",
                      waits, r.outcome or "", timestamp(r.accepted_at))
    which = "active Runs" if active else (f"{outcome} Runs" if outcome else "Runs")
    print_list_table(table, empty=f"no {which} in Project {who.project}"
                     + (" on this page" if page_token else ""))
    if reply.page.next_page_token:
        out.print(f"more: --page-token {reply.page.next_page_token}")


@app.command("wait")
def wait(run_id: str, member: opt.Member = None, project: opt.Project = None,
         output: opt.OutputOpt = Output.table, timeout: opt.WaitTimeout = None,
         quiet: opt.Quiet = False) -> None:
    """Wait for a Run to end, showing progress. Exit 0 succeeded, 1 failed/cancelled/lost/timed-out."""
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            return await wait_run(p, who, run_id, timeout=timeout, quiet=quiet)

    run = _run(body())
    if output is Output.json:
        print_json(run_summary(run))
    else:
        print_run(run)
    raise typer.Exit(outcome_exit(run.outcome))


@app.command("cancel")
def cancel(run_id: str, member: opt.Member = None, project: opt.Project = None,
           reason: Annotated[str, typer.Option(help="why, for people (≤ 500 characters)")] = "",
           command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table,
           wait_end: opt.Wait = False, timeout: opt.WaitTimeout = None,
           quiet: opt.Quiet = False) -> None:
    """Ask a Run to stop. With --wait, wait until it has ended."""
    if len(reason) > 500:
        raise CliError("--reason is longer than 500 characters", "shorten it", Exit.USAGE)
    who, conn = actor(member, project), connection()

    async def body():
        async with Platform(conn) as p:
            reply = await p.request(ec.CancelRun(metadata=command_metadata(who, command_id),
                                                 run_id=run_id, reason=reason))
            run = await wait_run(p, who, run_id, timeout=timeout, quiet=quiet) if wait_end else None
            return reply, run

    reply, run = _run(body())
    if output is Output.json:
        print_json({"cancel": as_dict(reply), "run": run_summary(run) if run else None})
    else:
        if reply.cancel_recorded:
            out.print(f"cancellation of {run_id} recorded (phase {reply.phase})")
        elif reply.outcome:
            out.print(f"{run_id} had already ended: {reply.outcome}")
        else:
            out.print(f"{run_id}: a cancellation was already recorded (phase {reply.phase})")
        if run is not None:
            print_run(run)
    if run is not None:
        raise typer.Exit(Exit.OK if run.outcome in OUTCOMES else Exit.UNCERTAIN)


@app.command("rerun")
def rerun(run_id: str, member: opt.Member = None, project: opt.Project = None,
          command_id: opt.CommandId = None, output: opt.OutputOpt = Output.table,
          wait_end: opt.Wait = False, timeout: opt.WaitTimeout = None,
          quiet: opt.Quiet = False) -> None:
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
        print_json({"rerun": as_dict(reply), "run": run_summary(run) if run else None})
    else:
        commit = reply.repository_commit[:12] or "the revision's commit"
        out.print(f"Run {reply.run_id} reruns {reply.rerun_of} (revision {reply.revision}, "
                  f"at {commit}; phase {reply.phase})", markup=False, highlight=False)
        if run is not None:
            print_run(run)
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
