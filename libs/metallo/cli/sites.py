"""``metallo site drain|resume|drains``: operator requests to Execution Core
(``DrainSite``, ``ResumeSite``, ``ListSiteDrains``; docs/operators.md).

A draining Site gets no new Attempts: planning and retries wait with the visible
reason ``site-draining`` (``metallo run show``), while accepted work on the Site
goes on, is observed and can be cancelled. Needs the operator capability
``sites.drain`` (``platform.read`` to list).
"""

from __future__ import annotations

from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.grants import operator_request
from metallo.cli.render import Output, out, print_json, print_list_table


def drain_dict(d) -> dict:
    """JSON shape of a SiteDrain message."""
    return {"site": d.site_id, "drained_by": d.drained_by, "drained_at": d.drained_at,
            "reason": d.reason, "active_runs": d.active_runs}


def drain(site: Annotated[str, typer.Argument(help="Site id, e.g. lab-slurm")],
          reason: Annotated[str, typer.Option(help="why, for other operators (≤ 200 characters)")] = "",
          member: opt.Member = None, output: opt.OutputOpt = Output.table) -> None:
    """Drain a Site: no new Attempts go there; accepted work continues and is observed."""
    from metallo.execution_core.v1 import execution_core_pb2 as ec
    from metallo.operator_requests import operator_metadata

    reply = operator_request(member, lambda who: ec.DrainSite(
        metadata=operator_metadata(who.member), site_id=site, reason=reason))
    if output is Output.json:
        print_json({**drain_dict(reply.drain), "already_draining": reply.already_draining})
        return
    d = reply.drain
    state = "already draining" if reply.already_draining else "draining"
    out.print(f"{d.site_id} {state} since {d.drained_at} (by {d.drained_by}); "
              f"{d.active_runs} active Run(s) there continue; new Attempts wait "
              f"(`metallo site resume {d.site_id}` ends the drain)", markup=False, highlight=False)


def resume(site: Annotated[str, typer.Argument(help="Site id, e.g. lab-slurm")],
           member: opt.Member = None, output: opt.OutputOpt = Output.table) -> None:
    """Resume a drained Site: it takes new Attempts again; waiting Runs are planned now."""
    from metallo.execution_core.v1 import execution_core_pb2 as ec
    from metallo.operator_requests import operator_metadata

    reply = operator_request(member, lambda who: ec.ResumeSite(
        metadata=operator_metadata(who.member), site_id=site))
    if output is Output.json:
        print_json({"site": reply.site_id, "was_draining": reply.was_draining,
                    "runs_woken": reply.runs_woken})
        return
    if not reply.was_draining:
        out.print(f"{reply.site_id} was not draining; nothing changed", markup=False)
        return
    out.print(f"{reply.site_id} resumed; {reply.runs_woken} waiting Run(s) planned again",
              markup=False)


def drains(member: opt.Member = None, output: opt.OutputOpt = Output.table) -> None:
    """List the draining Sites with their active Runs."""
    from metallo.cli.transport import query_metadata
    from metallo.execution_core.v1 import execution_core_pb2 as ec

    reply = operator_request(member, lambda who: ec.ListSiteDrains(metadata=query_metadata(who)))
    if output is Output.json:
        print_json({"drains": [drain_dict(d) for d in reply.drains]})
        return
    from rich.table import Table

    table = Table(title="Draining Sites", title_justify="left")
    for column in ("site", "since", "by", "active Runs", "reason"):
        table.add_column(column)
    for d in reply.drains:
        table.add_row(d.site_id, d.drained_at, d.drained_by, str(d.active_runs), d.reason)
    print_list_table(table, empty="no Site is draining")


COMMANDS = (("drain", drain), ("resume", resume), ("drains", drains))
