"""``metallo run reconcile RUN --mark-lost`` (Execution Core's ReconcileRun; docs/runs.md,
Lost Attempts): an operator ends an Attempt the Site no longer knows sooner than the
reconciliation period would.

Without ``--yes`` it is a dry run: Execution Core explains what the Site said and
what the decision would do, and nothing changes. With ``--yes`` the decision is
recorded (audited: actor, Run, decision, time) and the Run ends ``lost`` shortly.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit
from metallo.cli.render import Output, as_dict, out, print_json
from metallo.cli.settings import actor, connection
from metallo.cli.transport import Platform, command_metadata
from metallo.execution_core.v1 import execution_core_pb2 as ec

MAX_REASON = 500


def register(app: typer.Typer) -> None:
    """Add ``reconcile`` to the ``run`` command group."""
    app.command("reconcile")(reconcile)


def reconcile(
    run_id: str,
    member: opt.Member = None,
    project: opt.Project = None,
    mark_lost: Annotated[bool, typer.Option(
        "--mark-lost", help="end the current Attempt as lost (the Site no longer knows it)")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="record the decision (default: a dry run)")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="only explain what the decision would do (the default)")] = False,
    reason: Annotated[str, typer.Option(help="why, for the audit record (≤ 500 characters)")] = "",
    command_id: opt.CommandId = None,
    output: opt.OutputOpt = Output.table,
) -> None:
    """Decide about a Run whose Attempt the Site cannot vouch for. Without --yes: a dry
    run that explains and changes nothing. Needs runs.cancel; the decision is audited."""
    if not mark_lost:
        raise CliError("name the decision", "pass --mark-lost (the only decision so far)", Exit.USAGE)
    if yes and dry_run:
        raise CliError("--yes and --dry-run contradict each other",
                       "drop --dry-run to record the decision, or --yes to explain it only", Exit.USAGE)
    if len(reason) > MAX_REASON:
        raise CliError(f"--reason is longer than {MAX_REASON} characters", "shorten it", Exit.USAGE)
    who, conn = actor(member, project), connection()

    async def body() -> ec.ReconcileRunReply:
        async with Platform(conn) as p:
            return await p.request(ec.ReconcileRun(
                metadata=command_metadata(who, command_id), run_id=run_id, decision="mark-lost",
                dry_run=not yes, reason=reason))

    try:
        reply = asyncio.run(body())
    except CliError as refused:
        if refused.code == "not-reconcilable":
            refused.hint = (f"`metallo run show {run_id}` shows what the Site reports; "
                            f"`metallo run cancel {run_id}` stops work the Site still knows")
        raise
    if output is Output.json:
        print_json(as_dict(reply))
    else:
        out.print(reconcile_text(reply), markup=False, highlight=False)
    if reply.dry_run and not reply.eligible:
        raise typer.Exit(Exit.USAGE)


def reconcile_text(reply: ec.ReconcileRunReply) -> str:
    """What the reply means, for people: the explanation and what happens next."""
    if reply.dry_run:
        verdict = "allowed" if reply.eligible else "not allowed"
        tail = (f"\ndry run: nothing changed; `metallo run reconcile {reply.run_id} --mark-lost --yes` "
                "records it" if reply.eligible else "\ndry run: nothing changed")
        return f"mark-lost of Run {reply.run_id}: {verdict} — {reply.explanation}{tail}"
    then = "a new Attempt follows (retry.onLost)" if reply.will_retry else "the Run ends lost shortly"
    return (f"Attempt {reply.attempt_number} of Run {reply.run_id} marked lost (audited); {then}. "
            f"`metallo run wait {reply.run_id}` follows it")
