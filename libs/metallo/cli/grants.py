"""``metallo site grant create|revoke|list``: ``psb_`` command grants for Site
Runtimes (seed 004 §4B), through Site Coordination's operator functions
(``site_coordination.application.grants``) on its own database.

This is an operator command: it needs Site Coordination's database settings
(``METALLO_SITE_COORDINATION_DATABASE_URL`` or ``METALLO_POSTGRES_URL``), never a
member's. The secret is printed once on stdout and stored nowhere.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit
from metallo.cli.render import Output, err, out, print_json, print_list_table
from site_coordination.domain.errors import Refusal

app = typer.Typer(no_args_is_help=True, help="Command grants (psb_) of Site Runtimes.")


@asynccontextmanager
async def _transactions():
    """A transaction factory over Site Coordination's database (its Settings)."""
    from metallo.persistence.engine import create_engine, session_factory
    from site_coordination.adaptors.postgres_store import PostgresSiteStore
    from site_coordination.adaptors.settings import Settings

    engine = create_engine(Settings.from_environment().database_url, pool_size=1)
    sessions = session_factory(engine)

    @asynccontextmanager
    async def transaction():
        async with sessions.begin() as session:
            yield PostgresSiteStore(session)

    try:
        yield transaction
    finally:
        await engine.dispose()


def _database_errors(exc: Exception) -> CliError:
    from site_coordination.domain.errors import Refusal

    if isinstance(exc, Refusal):
        return CliError(f"{exc.code}: {exc.message}",
                        "correct the option named in the message and run again", Exit.USAGE,
                        code=exc.code)
    return CliError(f"cannot use the Site Coordination database: {type(exc).__name__}",
                    "start PostgreSQL and migrate (`metallo dev up` or `python -m "
                    "site_coordination migrate`); set METALLO_SITE_COORDINATION_DATABASE_URL",
                    Exit.UNCERTAIN, code="database-unavailable")


def _call(fn):
    # Imported here: every other metallo command would pay for SQLAlchemy at start.
    from asyncpg import PostgresError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return asyncio.run(fn())
    except CliError:
        raise
    except (TimeoutError, OSError, SQLAlchemyError, PostgresError, Refusal) as exc:
        raise _database_errors(exc) from None


def grant_dict(g) -> dict:
    """JSON shape of a CommandGrant (never a secret)."""
    return {"grant_id": g.grant_id, "site": g.stream.site_id, "environment": g.stream.environment,
            "label": g.label, "created_at": g.created_at.isoformat(),
            "expires_at": g.expires_at.isoformat(),
            "revoked_at": g.revoked_at.isoformat() if g.revoked_at else None}


def _check_stream(site: str, environment: str) -> None:
    """Refuse a grant for a stream no governed Site has (exit 2), before any write."""
    from metallo.governance import GovernanceError, GovernanceFile
    from site_coordination.adaptors.settings import Settings

    path = Settings.from_environment().governance_file
    try:
        known = GovernanceFile(path).current().site(site)
    except GovernanceError as exc:
        raise CliError(f"governance file {path} is invalid: {exc}",
                       "fix the file (every error is listed above) and run again",
                       Exit.USAGE) from None
    if known is None:
        raise CliError(f"no Site {site!r} in the governance file {path}",
                       "use a Site id listed there (or add the Site first)", Exit.USAGE)
    if known.environment != environment:
        raise CliError(f"Site {site!r} is a {known.environment} Site, not {environment}",
                       f"use --environment {known.environment}", Exit.USAGE)


@app.command("create")
def create(site: Annotated[str, typer.Option(help="Site id, e.g. lab-slurm")],
           environment: Annotated[str, typer.Option(help="slurm or k8s")],
           expires: Annotated[str, typer.Option(help="lifetime: 45s, 90m, 12h, 30d (≤ 400d)")] = "30d",
           label: Annotated[str, typer.Option(help="free text for operators")] = "",
           output: opt.OutputOpt = Output.table) -> None:
    """Create a grant for one stream (Site + environment); print its secret once."""
    from site_coordination.application.grants import create_command_grant
    from site_coordination.domain.errors import Refusal
    from site_coordination.domain.grants import parse_duration

    try:
        seconds = parse_duration(expires)
    except Refusal as exc:
        raise CliError(f"{exc.code}: {exc.message}", "e.g. --expires 30d", Exit.USAGE) from None
    if environment in ("slurm", "k8s"):  # other values get the domain's own refusal
        _check_stream(site, environment)

    async def body():
        async with _transactions() as transaction:
            return await create_command_grant(transaction, site, environment, seconds, label)

    issued = _call(body)
    if output is Output.json:
        print_json({**grant_dict(issued.grant), "secret": issued.secret})
        return
    err.print(f"grant {issued.grant.grant_id} for {issued.grant.stream.site_id}/"
              f"{issued.grant.stream.environment} expires {issued.grant.expires_at.isoformat()}; "
              "the secret below is shown only now: save it in a file readable only by the "
              "Site Runtime (mode 0600) and give its path as --grant-file or "
              "SITE_API_CREDENTIAL_FILE", markup=False, highlight=False)
    typer.echo(issued.secret)


@app.command("revoke")
def revoke(grant_id: str, output: opt.OutputOpt = Output.table) -> None:
    """Revoke a grant now (the Runtime holding it is refused from its next request)."""
    from site_coordination.application.grants import revoke_command_grant

    async def body():
        async with _transactions() as transaction:
            return await revoke_command_grant(transaction, grant_id)

    changed = _call(body)
    if output is Output.json:
        print_json({"grant_id": grant_id, "revoked": changed})
    if not changed:
        raise CliError(f"{grant_id}: no active grant with this id (unknown or already revoked)",
                       "`metallo site grant list` shows the grants", Exit.NOT_FOUND,
                       code="grant-not-found")
    if output is Output.table:
        out.print(f"revoked {grant_id}")


@app.command("list")
def list_grants(output: opt.OutputOpt = Output.table) -> None:
    """List every grant, newest first (never a secret)."""
    from site_coordination.application.grants import list_command_grants

    async def body():
        async with _transactions() as transaction:
            return await list_command_grants(transaction)

    grants = _call(body)
    if output is Output.json:
        print_json({"grants": [grant_dict(g) for g in grants]})
        return
    from rich.table import Table

    table = Table(title="Command grants", title_justify="left")
    for column in ("grant", "site", "environment", "expires", "revoked", "label"):
        table.add_column(column)
    for g in grants:
        table.add_row(g.grant_id, g.stream.site_id, g.stream.environment,
                      g.expires_at.isoformat(timespec="seconds"),
                      g.revoked_at.isoformat(timespec="seconds") if g.revoked_at else "", g.label)
    print_list_table(table, empty="no command grants (create one with `metallo site grant create`)")
