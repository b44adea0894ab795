"""``metallo repo branches REPO``: a repository's branches as the platform reads it
(Workload Portfolio's ListBranches), with the platform's credential and CA — so it
works where the member's own ``git ls-remote`` cannot (the lab Git server)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.render import Output, as_dict, out, print_json, print_list_table
from metallo.cli.repository import repository_url
from metallo.cli.settings import actor, connection
from metallo.cli.transport import Platform, query_metadata
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp

app = typer.Typer(no_args_is_help=True, help="Repositories as the platform reads them.")


@app.command("branches")
def branches(
    repo: Annotated[str, typer.Argument(help="repository: path, file:// or https:// URL")],
    member: opt.Member = None, project: opt.Project = None,
    output: opt.OutputOpt = Output.table,
) -> None:
    """List REPO's branches (name, tip commit; the default branch marked), at most 1000.

    Exit 0 listed; 2 refused; 3 no such repository (or not readable) or Project.
    """
    who, conn = actor(member, project), connection()
    url = repository_url(repo)

    async def body():
        async with Platform(conn) as p:
            return await p.request(wp.ListBranches(metadata=query_metadata(who),
                                                   repository_url=url))

    reply = asyncio.run(body())
    if output is Output.json:
        print_json(as_dict(reply))
        return
    from rich.table import Table

    table = Table(title=f"Branches of {url}", title_justify="left")
    for column in ("branch", "commit", ""):
        table.add_column(column)
    for b in reply.branches:
        table.add_row(b.name, b.commit[:12], "default" if b.name == reply.default_branch else "")
    print_list_table(table, empty=f"{url} has no branches")
    if reply.truncated:
        out.print(f"(only the first {len(reply.branches)} branches by name are shown)")
