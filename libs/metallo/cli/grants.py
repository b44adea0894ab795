"""``metallo site grant create|revoke|list``: ``psb_`` command grants for Site
Runtimes (seed 004 §4B), as operator requests to Site Coordination over RabbitMQ
(``CreateCommandGrant``, ``RevokeCommandGrant``, ``ListCommandGrants``).

The acting member needs the operator capability ``sites.grants`` in the
governance file (docs/governance.md, Operators). The secret is made here and
printed once on stdout; Site Coordination receives and keeps only its SHA-256.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.render import Output, err, out, print_json, print_list_table

app = typer.Typer(no_args_is_help=True, help="Command grants (psb_) of Site Runtimes.")


def grant_dict(g) -> dict:
    """JSON shape of a CommandGrant message (never a secret)."""
    return {"grant_id": g.grant_id, "site": g.site_id, "environment": g.environment,
            "label": g.label, "created_at": g.created_at, "expires_at": g.expires_at,
            "revoked_at": g.revoked_at or None}


def operator_request(member: str | None, build):
    """Send the operator request ``build(who)`` and return its typed reply."""
    from metallo.cli.settings import connection, operator_actor
    from metallo.cli.transport import Platform

    who, conn = operator_actor(member), connection()

    async def body():
        async with Platform(conn) as p:
            return await p.request(build(who))

    return asyncio.run(body())


@app.command("create")
def create(site: Annotated[str, typer.Option(help="Site id, e.g. lab-slurm")],
           environment: Annotated[str, typer.Option(help="slurm or k8s")],
           expires: Annotated[str, typer.Option(help="lifetime: 45s, 90m, 12h, 30d (≤ 400d)")] = "30d",
           label: Annotated[str, typer.Option(help="free text for operators")] = "",
           member: opt.Member = None, output: opt.OutputOpt = Output.table) -> None:
    """Create a grant for one stream (Site + environment); print its secret once."""
    from metallo.operator_requests import create_grant_command, new_grant_secret

    secret = new_grant_secret()
    reply = operator_request(member, lambda who: create_grant_command(
        who.member, site, environment, expires, label, secret))
    grant = reply.grant
    if output is Output.json:
        print_json({**grant_dict(grant), "secret": secret})
        return
    err.print(f"grant {grant.grant_id} for {grant.site_id}/{grant.environment} expires "
              f"{grant.expires_at}; the secret below is shown only now: save it in a file "
              "readable only by the Site Runtime (mode 0600) and give its path as --grant-file "
              "or SITE_API_CREDENTIAL_FILE", markup=False, highlight=False)
    typer.echo(secret)


@app.command("revoke")
def revoke(grant_id: str, member: opt.Member = None, output: opt.OutputOpt = Output.table) -> None:
    """Revoke a grant now (the Runtime holding it is refused from its next request)."""
    from metallo.cli.exits import CliError, Exit
    from metallo.operator_requests import revoke_grant_command

    reply = operator_request(member, lambda who: revoke_grant_command(who.member, grant_id))
    if output is Output.json:
        print_json({"grant_id": grant_id, "revoked": reply.revoked})
    if not reply.revoked:
        raise CliError(f"{grant_id}: no active grant with this id (unknown or already revoked)",
                       "`metallo site grant list` shows the grants", Exit.NOT_FOUND,
                       code="grant-not-found")
    if output is Output.table:
        out.print(f"revoked {grant_id}")


@app.command("list")
def list_grants(member: opt.Member = None, output: opt.OutputOpt = Output.table) -> None:
    """List every grant, newest first (never a secret)."""
    from metallo.cli.transport import query_metadata
    from metallo.site_coordination.v1 import site_coordination_pb2 as sc

    reply = operator_request(member, lambda who: sc.ListCommandGrants(metadata=query_metadata(who)))
    if output is Output.json:
        print_json({"grants": [grant_dict(g) for g in reply.grants]})
        return
    from rich.table import Table

    table = Table(title="Command grants", title_justify="left")
    for column in ("grant", "site", "environment", "expires", "revoked", "label"):
        table.add_column(column)
    for g in reply.grants:
        table.add_row(g.grant_id, g.site_id, g.environment, g.expires_at, g.revoked_at, g.label)
    print_list_table(table, empty="no command grants (create one with `metallo site grant create`)")
