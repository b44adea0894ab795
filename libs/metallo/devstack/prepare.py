"""Everything ``dev up`` does before starting processes: reach PostgreSQL and
RabbitMQ, migrate each service database, make the development TLS certificate,
the lab Git operator token and Git credentials, and a ``psb_`` command grant for
the Site Runtime (seed 004 §4B), one RabbitMQ user per service and the lab issuer's
logins (docs/operators.md, Trust boundaries). Idempotent except the grant (a new one each up;
``down`` revokes it)."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from metallo.devstack.components import (
    LAB_ACCOUNTS_FILE,
    LAB_PASSWORDS_FILE,
    SERVICES,
    Options,
    runnable,
)
from metallo.devstack.layout import REPO_ROOT, Layout, write_secret
from metallo.devstack.rabbitmq import BrokerUsersError, ensure_users

GRANT_SECONDS = 7 * 86400  # a dev grant outlives a working week, never a dev machine's year


class PrepareError(Exception):
    """A precondition failed; the message says what to do."""


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a TCP connection to host:port succeeds within ``timeout`` seconds."""
    with socket.socket() as s:
        s.settimeout(timeout)
        return s.connect_ex((host, port)) == 0


def check_infrastructure() -> None:
    """PostgreSQL on 127.0.0.1:5432 and RabbitMQ on 127.0.0.1:5672 must answer."""
    if not port_open("127.0.0.1", 5432):
        raise PrepareError("PostgreSQL is not answering on 127.0.0.1:5432: start it (scripts/demo "
                           "does; or `docker compose up -d postgres`)")
    if not port_open("127.0.0.1", 5672):
        raise PrepareError("RabbitMQ is not answering on 127.0.0.1:5672: start it (scripts/demo "
                           "does; or `docker compose up -d rabbitmq`)")


async def drop_all() -> list[str]:
    """Drop every service database of the dev stack (``dev up --fresh``); their names."""
    from metallo.persistence.engine import database_url, drop_database

    dropped = []
    for service in SERVICE_DATABASES:
        await drop_database(database_url(service))
        dropped.append(service)
    return dropped


SERVICE_DATABASES = ("site_coordination", "workload_portfolio", "execution_core",
                     "pipeline_coordination")


async def migrate_all(say=print) -> list[str]:
    """Migrate the database of every service present in this checkout; their names.

    Autovacuum is checked on each database, but a warning is said once through ``say``
    for all of them (not once per service); the services the stack then starts are told
    not to repeat it (``components.common_env``).
    """
    from metallo.persistence.engine import database_url
    from metallo.persistence.migrations import autovacuum_is_on, autovacuum_warning, migrate

    done, without_autovacuum = [], []
    for service in SERVICE_DATABASES:
        migrations = REPO_ROOT / "services" / service / "migrations"
        if not (migrations / "env.py").exists() or not runnable(service):
            continue
        url = database_url(service)
        await migrate(url, migrations, check_autovacuum=False)
        done.append(service)
        if not await autovacuum_is_on(url):
            without_autovacuum.append(service)
    if without_autovacuum:
        say(f"warning: {autovacuum_warning('the services update')} (databases of "
            f"{', '.join(without_autovacuum)})")
    return done


def ensure_certificates(layout: Layout) -> Path:
    """The development CA and server certificate for 127.0.0.1/localhost; the CA path."""
    from site_coordination.adaptors.edge.tls import make_dev_certificates

    ca = layout.certs / "ca.pem"
    if not (ca.exists() and (layout.certs / "server.pem").exists()
            and (layout.certs / "server-key.pem").exists()):
        make_dev_certificates(layout.certs)
    return ca


def ensure_git_credentials(layout: Layout, options: Options) -> None:
    """The lab Git operator token (Site Coordination) and the same credential for the
    Workload Portfolio, which reads actions.yaml from the lab Git server."""
    token_file = layout.secrets / "git-operator-token"
    if not token_file.exists():
        write_secret(token_file, secrets.token_urlsafe(32))
    token = token_file.read_text(encoding="utf-8").strip()
    write_secret(layout.secrets / "git-credentials.json", json.dumps(
        {f"127.0.0.1:{options.edge_port}": {"username": "operator", "secret": token}}))


@asynccontextmanager
async def _site_transactions():
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


async def create_runtime_grant(layout: Layout, options: Options) -> str:
    """A new ``psb_`` grant for (site, slurm) written to ``secrets/runtime-grant`` (0600);
    returns its grant id."""
    from site_coordination.application.grants import create_command_grant

    async with _site_transactions() as transaction:
        issued = await create_command_grant(transaction, options.site_id, "slurm", GRANT_SECONDS,
                                            "metallo dev up: Site Runtime")
    write_secret(layout.secrets / "runtime-grant", issued.secret + "\n")
    return issued.grant.grant_id


async def revoke_runtime_grant(grant_id: str) -> bool:
    """Revoke the dev stack's runtime grant (True when it was active)."""
    from site_coordination.application.grants import revoke_command_grant

    async with _site_transactions() as transaction:
        return await revoke_command_grant(transaction, grant_id)


async def count_active_runs() -> int:
    """Runs of the dev stack's Execution Core not yet terminal (accepted ones too).
    Raises the driver's error when its database cannot be reached."""
    import asyncpg

    from metallo.persistence.engine import database_url
    from metallo.persistence.wakeups import driver_dsn

    conn = await asyncpg.connect(driver_dsn(database_url("execution_core")), timeout=5)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM runs WHERE phase <> 'terminal'"))
    finally:
        await conn.close()


async def ensure_notifications_queue(options: Options) -> str:
    """Declare the bounded queue bound to every event (``api_notifications.events``,
    :mod:`metallo.messaging.notifications`), standing in for the Go API's bridge so
    that events no platform service consumes (e.g. ``RunAccepted``) stay routable:
    the outbox relay would otherwise retry them and hold back the Run's later
    messages."""
    from metallo.messaging import Topology
    from metallo.messaging.notifications import declare_notifications_queue

    return await declare_notifications_queue(options.amqp_url,
                                             Topology(prefix=options.topology_prefix))


def ensure_lab_accounts(layout: Layout) -> list[str]:
    """One lab issuer login per governance member with an ``oidc_subject``: user name the
    member id, a random password kept in ``secrets/lab-passwords.json`` (0600, reused
    by the next ``dev up``; ``metallo dev login`` reads it), its scrypt hash in
    ``secrets/lab-accounts.json`` for the issuer. Returns the user names."""
    from metallo.governance import GovernanceFile
    from metallo.identity.lab_login import LabAccount, hash_password, write_accounts

    governance = GovernanceFile(REPO_ROOT / "examples" / "governance.yaml").current()
    path = layout.secrets / LAB_PASSWORDS_FILE
    try:
        passwords = json.loads(path.read_text())
    except (OSError, ValueError):
        passwords = {}
    accounts = []
    for member in governance.members.values():
        if member.oidc_subject:
            password = passwords.setdefault(member.id, secrets.token_urlsafe(18))
            accounts.append(LabAccount(member.id, member.oidc_subject, hash_password(password)))
    write_secret(path, json.dumps(passwords, indent=1))
    write_accounts(layout.secrets / LAB_ACCOUNTS_FILE, accounts)
    return [a.username for a in accounts]


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` made: migrated services, CA file, runtime grant id."""

    migrated: list[str]
    ca_file: Path
    grant_id: str


async def prepare(layout: Layout, options: Options, say=print, fresh: bool = False) -> Prepared:
    """Run every preparation step, reporting each through ``say``; ``fresh`` first drops
    the service databases (development data only)."""
    layout.make()
    check_infrastructure()
    if fresh:
        say(f"dropping the dev databases: {', '.join(await drop_all())}")
    say("migrating the service databases")
    migrated = await migrate_all(say)
    say(f"migrated: {', '.join(migrated) or 'none'}")
    notifications = await ensure_notifications_queue(options)
    say(f"notifications queue: {notifications}")
    ca = await asyncio.to_thread(ensure_certificates, layout)
    say(f"development CA: {ca}")
    ensure_git_credentials(layout, options)
    try:
        users = await ensure_users(layout, options.amqp_url, SERVICES, options.topology_prefix)
    except BrokerUsersError as exc:
        raise PrepareError(str(exc)) from None
    say(f"RabbitMQ users: {', '.join(users)}")
    say(f"lab issuer logins: {', '.join(await asyncio.to_thread(ensure_lab_accounts, layout))}")
    grant_id = await create_runtime_grant(layout, options)
    say(f"runtime command grant {grant_id} for {options.site_id}/slurm")
    return Prepared(migrated, ca, grant_id)
