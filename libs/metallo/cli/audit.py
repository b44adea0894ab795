"""``metallo audit list``: the audit records of a Project (or, with ``--platform``,
of platform-wide operator decisions) from every owner that records them, merged
oldest first (docs/operators.md, Audit; ``ListAuditRecords`` in docs/contracts.md).

Each owner answers for its own records; this command asks each and merges them
(``metallo.audit.merge``), so its page token holds one position per owner. Needs
``audit.read`` in the Project or the operator capability ``platform.read``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit
from metallo.cli.render import Output, next_page_command, out, print_json, print_list_table

app = typer.Typer(no_args_is_help=True, help="The audit of decisions (who did what, when).")

MAX_PAGE = 200


def owners():
    """(service, ListAuditRecords class) of every owner that keeps audit records."""
    from metallo.execution_core.v1 import execution_core_pb2 as ec
    from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc
    from metallo.site_coordination.v1 import site_coordination_pb2 as sc

    return (("execution_core", ec.ListAuditRecords),
            ("pipeline_coordination", pc.ListAuditRecords),
            ("site_coordination", sc.ListAuditRecords))


def record_dict(r) -> dict:
    """JSON shape of an AuditRecord (the summary as an object)."""
    return {"record_id": r.record_id, "service": r.service, "recorded_at": r.recorded_at,
            "actor": r.actor, "principal": r.principal, "project": r.project,
            "action": r.action, "affected": dict(sorted(r.affected.items())),
            "request_id": r.request_id, "correlation_id": r.correlation_id,
            "decision": r.decision, "code": r.code,
            "summary": json.loads(r.summary_json) if r.summary_json else {}}


@app.command("list")
def list_records(
        project: opt.Project = None, member: opt.Member = None,
        platform: Annotated[bool, typer.Option(
            "--platform", help="platform-wide operator decisions (no Project; needs platform.read)")] = False,
        since: Annotated[str, typer.Option(help="RFC 3339 time, e.g. 2026-12-01T00:00:00Z")] = "",
        actor_id: Annotated[str, typer.Option("--actor", help="only this member (or principal)")] = "",
        limit: Annotated[int, typer.Option("--limit", min=1, max=MAX_PAGE, help="records per page")] = 50,
        page_token: Annotated[str, typer.Option(help="from the previous page")] = "",
        output: opt.OutputOpt = Output.table) -> None:
    """List audit records oldest first: time, service, actor, action, decision, ids."""
    from metallo.audit.merge import BadCursor, MergedCursor, merge_pages
    from metallo.cli.settings import actor, connection, operator_actor
    from metallo.cli.transport import Platform, query_metadata
    from metallo.common.v1 import common_pb2

    who = operator_actor(member) if platform else actor(member, project)
    conn = connection()
    known = owners()
    names = [name for name, _ in known]
    try:
        cursor = MergedCursor.decode(page_token, names) if page_token else MergedCursor.start(names)
    except BadCursor:
        raise CliError("--page-token is not a token this command printed",
                       "run the list again without --page-token", Exit.USAGE) from None

    async def body():
        pages = {}
        async with Platform(conn) as p:
            for name, query in known:
                if name not in cursor.positions:
                    continue
                pages[name] = await p.request(query(
                    metadata=query_metadata(who), filter=common_pb2.AuditFilter(
                        since=since, actor=actor_id, page=common_pb2.PageRequest(
                            page_size=limit, page_token=cursor.positions[name]))))
        return pages

    records, following = merge_pages(cursor, asyncio.run(body()), limit)
    token = following.encode()
    if output is Output.json:
        print_json({"records": [record_dict(r) for r in records], "next_page_token": token})
        return
    from rich.table import Table

    scope = "platform-wide" if platform else f"Project {who.project}"
    table = Table(title=f"Audit of {scope}", title_justify="left")
    for column in ("time", "service", "actor", "action", "decision", "affected"):
        table.add_column(column)
    for r in records:
        decision = r.decision + (f" ({r.code})" if r.code else "")
        affected = " ".join(f"{k}={v}" for k, v in sorted(r.affected.items()))
        table.add_row(r.recorded_at, r.service, r.actor or r.principal, r.action, decision,
                      affected)
    print_list_table(table, empty="no audit records match")
    if token:
        out.print("more: " + next_page_command("metallo audit list", token, {
            "--project": None if platform else who.project, "--platform": platform,
            "--since": since, "--actor": actor_id, "--limit": limit}),
            markup=False, highlight=False)
