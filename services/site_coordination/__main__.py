"""``python -m site_coordination`` — wiring and operator commands.

- ``serve``: migrate the database, start the ``AppendSiteCommand`` consumer
  (CommandServer), the ``RunCompleted`` consumer (ends a Run's repository grants),
  the OutboxRelay and the HTTPS Site edge (uvicorn), with the
  lab Git server under ``/git/`` when ``METALLO_LAB_GIT_ROOT`` is set. Settings:
  ``site_coordination.adaptors.settings`` and docs/site-edge.md.
- ``migrate``: only the migrations.
- ``dev-cert DIR``: a development CA and server certificate for 127.0.0.1/localhost.
- ``openapi [--output FILE]``: render the edge's OpenAPI document
  (``contracts/site/openapi.json``).
- ``grant create|revoke|list``: ``psb_`` command grants (the secret is printed once).
- ``git create-repo NAME``: a bare repository in ``METALLO_LAB_GIT_ROOT``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import asynccontextmanager
from pathlib import Path

import typer

from metallo.log_setup import configure_logging
from site_coordination.adaptors.edge.app import create_app

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
OPENAPI_PATH = Path(__file__).resolve().parents[2] / "contracts" / "site" / "openapi.json"

cli = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Site Coordination: ordered Site command streams and the HTTPS Site edge.")
grant_cli = typer.Typer(no_args_is_help=True, help="psb_ command grants for Site Runtimes.")
git_cli = typer.Typer(no_args_is_help=True, help="The lab Git server's repositories.")
cli.add_typer(grant_cli, name="grant")
cli.add_typer(git_cli, name="git")


def render_openapi() -> str:
    """The edge's OpenAPI document as committed (sorted keys, 2-space indent, newline)."""
    return json.dumps(create_app(None).openapi(), indent=2, sort_keys=True) + "\n"


@cli.command("openapi")
def openapi_command(output: Path = typer.Option(None, help="write here instead of stdout")) -> None:
    """Render the Site edge OpenAPI document."""
    text = render_openapi()
    if output:
        output.write_text(text)
    else:
        typer.echo(text, nl=False)


@cli.command("dev-cert")
def dev_cert(directory: Path) -> None:
    """Write a development CA (ca.pem) and server certificate/key for 127.0.0.1/localhost."""
    from metallo.dev_certificates import make_dev_certificates

    paths = make_dev_certificates(directory)
    typer.echo(f"CA certificate: {paths.ca_cert}\nserver certificate: {paths.server_cert}\n"
               f"server key: {paths.server_key}")


@cli.command("migrate")
def migrate_command() -> None:
    """Create/upgrade the Site Coordination database."""
    from metallo.persistence.migrations import migrate
    from site_coordination.adaptors.settings import Settings

    asyncio.run(migrate(Settings.from_environment().database_url, MIGRATIONS))


@asynccontextmanager
async def _transaction_factory():
    from metallo.persistence.engine import create_engine, session_factory
    from site_coordination.adaptors.postgres_store import PostgresSiteStore
    from site_coordination.adaptors.settings import Settings

    engine = create_engine(Settings.from_environment().database_url, pool_size=2)
    sessions = session_factory(engine)

    @asynccontextmanager
    async def transaction():
        async with sessions.begin() as session:
            yield PostgresSiteStore(session)

    try:
        yield transaction
    finally:
        await engine.dispose()


@grant_cli.command("create")
def grant_create(site: str = typer.Option(..., help="Site id"),
                 environment: str = typer.Option(..., help="slurm or k8s"),
                 expires: str = typer.Option("30d", help="lifetime: 45s, 90m, 12h, 30d"),
                 label: str = typer.Option("", help="free text for operators")) -> None:
    """Create a command grant for one stream; print its secret once."""
    from site_coordination.application.grants import create_command_grant
    from site_coordination.domain.errors import Refusal
    from site_coordination.domain.grants import parse_duration

    async def run():
        async with _transaction_factory() as transaction:
            return await create_command_grant(transaction, site, environment,
                                              parse_duration(expires), label)
    try:
        issued = asyncio.run(run())
    except Refusal as exc:
        typer.echo(f"error: {exc.code}: {exc.message}", err=True)
        raise typer.Exit(2) from None
    g = issued.grant
    typer.echo(f"grant {g.grant_id} for {g.stream} expires {g.expires_at.isoformat()}", err=True)
    typer.echo("the secret is shown only now:", err=True)
    typer.echo(issued.secret)


@grant_cli.command("revoke")
def grant_revoke(grant_id: str) -> None:
    """Revoke a command grant now."""
    from site_coordination.application.grants import revoke_command_grant

    async def run():
        async with _transaction_factory() as transaction:
            return await revoke_command_grant(transaction, grant_id)
    changed = asyncio.run(run())
    typer.echo(f"revoked {grant_id}" if changed else f"{grant_id}: unknown or already revoked")


@grant_cli.command("list")
def grant_list() -> None:
    """List command grants (never secrets)."""
    from site_coordination.application.grants import list_command_grants

    async def run():
        async with _transaction_factory() as transaction:
            return await list_command_grants(transaction)
    for g in asyncio.run(run()):
        state = "revoked" if g.revoked_at else "active-or-expired"
        typer.echo(f"{g.grant_id}\t{g.stream}\texpires {g.expires_at.isoformat()}\t{state}\t{g.label}")


@git_cli.command("create-repo")
def git_create_repo(name: str) -> None:
    """Create a bare repository (``demo.git``) in METALLO_LAB_GIT_ROOT."""
    from site_coordination.adaptors.lab_git.repositories import create_repository
    from site_coordination.adaptors.settings import Settings

    root = Settings.from_environment().lab_git_root
    if root is None:
        typer.echo("error: METALLO_LAB_GIT_ROOT is not set", err=True)
        raise typer.Exit(2)
    path, created = create_repository(root, name)
    typer.echo(f"{'created' if created else 'exists'}: {path}")


async def serve_forever() -> None:
    """Migrations, then the command consumer, the outbox relay and the edge until a signal."""
    from metallo.identity.issuer import LabIssuer
    from metallo.messaging import OutboxRelay, Topology
    from metallo.operations.asgi_metrics import RequestMetrics
    from metallo.operations.metrics import outbox_collector
    from metallo.operations.readiness import service_readiness
    from metallo.operations.server import OpsServer
    from metallo.persistence.engine import create_engine
    from metallo.persistence.migrations import migrate
    from site_coordination.adaptors.command_handlers import build_command_server
    from site_coordination.adaptors.edge.server import build_server
    from site_coordination.adaptors.event_handlers import build_event_consumer
    from site_coordination.adaptors.governance_authority import GovernanceAuthority
    from site_coordination.adaptors.lab_git.app import LabGitSettings
    from site_coordination.adaptors.metrics import site_metrics
    from site_coordination.adaptors.settings import Settings
    from site_coordination.adaptors.wiring import build_edge, edge_engine

    settings = Settings.from_environment()
    await migrate(settings.database_url, MIGRATIONS)
    engine = create_engine(settings.database_url)      # consumer and relay
    edge_db = edge_engine(settings.database_url)        # the edge's short requests
    topology = Topology(prefix=settings.topology_prefix)
    lab_git = None
    if settings.lab_git_root is not None:
        token = (settings.lab_git_operator_token_file.read_text().strip()
                 if settings.lab_git_operator_token_file else "")
        settings.lab_git_root.mkdir(parents=True, exist_ok=True)
        lab_git = LabGitSettings(root=settings.lab_git_root, operator_token=token)
    authority = GovernanceAuthority(settings.governance_file)
    app = build_edge(edge_db, settings.database_url, topology,
                     authority=authority,
                     issuer=LabIssuer.from_environment(settings.issuer_dir),
                     deferrals_file=settings.deferrals_file, settings=settings.edge,
                     lab_git=lab_git, draining=lambda: server.should_exit)
    server, sock = build_server(RequestMetrics(app), settings.serve)
    commands = build_command_server(engine, settings.amqp_url, topology, authority)
    events = build_event_consumer(engine, settings.amqp_url, topology)
    relay = OutboxRelay(engine, settings.amqp_url, topology, owner="site_coordination")
    ops = OpsServer("site_coordination",
                    service_readiness(engine, MIGRATIONS, lambda: commands.queue_consumers),
                    collectors=[outbox_collector("site_coordination", engine),
                                site_metrics(engine)])
    await ops.start()
    await relay.start()
    await commands.start()
    await events.start()
    # uvicorn handles SIGINT/SIGTERM itself and returns from serve().
    logging.getLogger("site_coordination").info(
        "Site edge on %s:%s", settings.serve.host, sock.getsockname()[1])
    try:
        await server.serve(sockets=[sock])
    finally:
        await events.stop()
        await commands.stop()
        await relay.stop()
        await ops.stop()
        await edge_db.dispose()
        await engine.dispose()


@cli.command("serve")
def serve() -> None:
    """Run Site Coordination: migrations, command consumer, outbox relay, HTTPS edge."""
    configure_logging()
    asyncio.run(serve_forever())


if __name__ == "__main__":
    cli()
