"""Everything ``dev up`` does before starting processes: reach PostgreSQL and
RabbitMQ, migrate each service database, make the development TLS certificate,
the lab Git operator token and Git credentials, one RabbitMQ user per service and
the lab issuer's logins (docs/operators.md, Trust boundaries). Idempotent. The Site
Runtimes' ``psb_`` command grants (seed 004 §4B) are asked of Site Coordination once
it serves (``devstack.operator``, called by the supervisor)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from metallo.devstack.components import (
    LAB_ACCOUNTS_FILE,
    LAB_PASSWORDS_FILE,
    SERVICES,
    Options,
    issuer_key,
    runnable,
)
from metallo.devstack.layout import REPO_ROOT, Layout, write_secret
from metallo.devstack.rabbitmq import GO_API, BrokerUsersError, broker_url, ensure_users, vhost_of


class PrepareError(Exception):
    """A precondition failed; the message says what to do. ``hint`` and ``code``, when
    given, replace the CLI's generic next step and ``stack-failed`` code."""

    def __init__(self, message: str, *, hint: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        self.code = code


#: The next step when a dev database does not match this checkout's migrations.
FRESH_HINT = ("run `metallo dev up --fresh`: it drops and recreates the dev databases "
              "(their Runs and Pipelines are lost)")


def migration_mismatch(service: str, url: str, exc: Exception) -> PrepareError:
    """The plain refusal for a dev database this checkout cannot migrate: its Alembic
    revision is unknown here (``CommandError``), or a migration's SQL fails on what is
    already there (a table another checkout created: "relation ... already exists").
    Both mean another checkout (or branch) migrated the shared dev databases."""
    from alembic.util.exc import CommandError
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    if isinstance(exc, CommandError):
        detail = (f"it is at an Alembic revision this checkout does not have ({exc})")
    else:
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        first = first.split(") ", 1)[-1] if first.startswith("(") else first
        detail = f"this checkout's migrations fail on what is already there ({first})"
    return PrepareError(
        f"the dev database {database} ({service}) was migrated by another checkout or "
        f"branch: {detail}", hint=FRESH_HINT, code="dev-database-mismatch")


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

    Raises PrepareError (``dev-database-mismatch``, hinting ``dev up --fresh``) when a
    database was migrated by another checkout (:func:`migration_mismatch`).
    Autovacuum is checked on each database, but a warning is said once through ``say``
    for all of them (not once per service); the services the stack then starts are told
    not to repeat it (``components.common_env``).
    """
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import ProgrammingError

    from metallo.persistence.engine import database_url
    from metallo.persistence.migrations import autovacuum_is_on, autovacuum_warning, migrate

    done, without_autovacuum = [], []
    for service in SERVICE_DATABASES:
        migrations = REPO_ROOT / "services" / service / "migrations"
        if not (migrations / "env.py").exists() or not runnable(service):
            continue
        url = database_url(service)
        try:
            await migrate(url, migrations, check_autovacuum=False)
        except (CommandError, ProgrammingError) as exc:
            raise migration_mismatch(service, url, exc) from None
        done.append(service)
        if not await autovacuum_is_on(url):
            without_autovacuum.append(url)
    if without_autovacuum:
        say(f"warning: {autovacuum_warning(without_autovacuum[0])}")
    return done


def ensure_certificates(layout: Layout) -> Path:
    """The development CA and server certificate for 127.0.0.1/localhost; the CA path."""
    from metallo.dev_certificates import make_dev_certificates

    ca = layout.certs / "ca.pem"
    if not (ca.exists() and (layout.certs / "server.pem").exists()
            and (layout.certs / "server-key.pem").exists()):
        make_dev_certificates(layout.certs)
    return ca


def ensure_issuer_key(layout: Layout, fresh: bool = False) -> Path:
    """The key the lab issuer signs member and login tokens with
    (:func:`components.issuer_key`); returns its path.

    The stack's own key is made once (``private.pem`` 0600 in the 0700 issuer
    directory) and kept across ``dev down``/``dev up``, so a ``metallo dev login`` from
    before still verifies; ``fresh`` replaces it (the old logins are then refused). The
    Slurm lab's key is the lab's: it is used as it is and never replaced here.
    """
    from metallo.identity.issuer import generate_key

    key = issuer_key(layout)
    if key.parent != layout.issuer:
        return key
    if fresh:
        for name in ("private.pem", "jwks.json"):
            (layout.issuer / name).unlink(missing_ok=True)
    if not key.is_file():
        generate_key(layout.issuer)
    os.chmod(layout.issuer, 0o700)
    os.chmod(key, 0o600)
    return key


def ensure_git_credentials(layout: Layout, options: Options) -> None:
    """The lab Git operator token (Site Coordination) and the same credential for the
    Workload Portfolio, which reads actions.yaml from the lab Git server."""
    token_file = layout.secrets / "git-operator-token"
    if not token_file.exists():
        write_secret(token_file, secrets.token_urlsafe(32))
    token = token_file.read_text(encoding="utf-8").strip()
    write_secret(layout.secrets / "git-credentials.json", json.dumps(
        {f"127.0.0.1:{options.edge_port}": {"username": "operator", "secret": token}}))


async def ensure_notifications_queue(options: Options, url: str) -> str:
    """Declare the bounded queue bound to every event (``api_notifications.events``,
    :mod:`metallo.messaging.notifications`), standing in for the Go API's bridge so
    that events no platform service consumes (e.g. ``RunAccepted``) stay routable:
    the outbox relay would otherwise retry them and hold back the Run's later
    messages. ``url`` is the Go API's login (the bridge queue is its own)."""
    from metallo.messaging import Topology
    from metallo.messaging.notifications import declare_notifications_queue

    return await declare_notifications_queue(url, Topology(prefix=options.topology_prefix))


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


#: The next step when a Runtime's journal holds commands Site Coordination never issued.
STALE_JOURNAL_HINT = ("run `metallo dev up --fresh`: it drops the dev databases and clears "
                      "the Site Runtimes' journals together (their Runs and Pipelines are lost)")


async def issued(url: str, site_id: str, environment: str,
                 last: tuple[int, str]) -> tuple[bool, int]:
    """Whether Site Coordination (database ``url``) issued the command ``last``
    (sequence, command_id) on the stream, and how many commands that stream holds."""
    import asyncpg
    from sqlalchemy.engine import make_url

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        held = await conn.fetchval(
            "SELECT count(*) FROM site_commands WHERE site_id = $1 AND environment = $2",
            site_id, environment)
        same = await conn.fetchval(
            "SELECT 1 FROM site_commands WHERE site_id = $1 AND environment = $2"
            " AND sequence = $3 AND command_id = $4", site_id, environment, *last)
        return bool(same), int(held)
    finally:
        await conn.close()


async def check_runtime_journals(layout: Layout, options: Options, say=print) -> list[str]:
    """Compare each Site Runtime's delivery journal under ``layout.runtime`` with Site
    Coordination's stream it pulls: the newest journaled command must be one Site
    Coordination issued at that sequence.

    A journal of a stream Site Coordination no longer holds at all (its database was
    dropped: a new stream numbers its commands from 1 again) belongs to a stream that
    is gone: it is cleared, as ``--fresh`` clears it, and said; returns the executors
    cleared. A journal that disagrees with a stream that still holds commands is
    refused (``dev-runtime-journal-stale``, hinting ``--fresh``): nothing is guessed."""
    from metallo.devstack.components import K8S_SITE_ID
    from metallo.devstack.runtime_state import executor_states, last_journaled, stream_of
    from metallo.persistence.engine import database_url

    url = database_url("site_coordination")
    cleared = []
    for executor, state_dir in executor_states(layout.runtime).items():
        last = last_journaled(state_dir)
        if last is None:
            continue
        site_id, environment = stream_of(executor, options.site_id, K8S_SITE_ID)
        same, held = await issued(url, site_id, environment, last)
        if same:
            continue
        if held:
            raise PrepareError(
                f"the {executor} Site Runtime's journal ({state_dir}) does not match Site "
                f"Coordination's ({site_id}, {environment}) stream: its sequence {last[0]} "
                "was issued as another command (the databases were restored or replaced "
                "while the journal was kept)", hint=STALE_JOURNAL_HINT,
                code="dev-runtime-journal-stale")
        shutil.rmtree(state_dir, ignore_errors=True)
        cleared.append(executor)
        say(f"cleared the {executor} Site Runtime's journal ({state_dir}): it holds commands of "
            f"a ({site_id}, {environment}) stream Site Coordination no longer has (its database "
            "is new). Native work those commands started is not adopted: Slurm jobs of them run "
            "on until they end (`squeue --me`, `scancel`)")
    return cleared


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` made: migrated services and the CA file. The runtime grant is
    made later by the supervisor, once Site Coordination serves (devstack.operator)."""

    migrated: list[str]
    ca_file: Path


async def prepare(layout: Layout, options: Options, say=print, fresh: bool = False) -> Prepared:
    """Run every preparation step, reporting each through ``say``; ``fresh`` first drops
    the service databases (development data only)."""
    layout.make()
    check_infrastructure()
    if fresh:
        say(f"dropping the dev databases: {', '.join(await drop_all())}")
        # The Runtimes' journals belong to the streams just dropped: a new stream numbers
        # its commands from 1 again, which an old journal would refuse as a mismatch.
        shutil.rmtree(layout.runtime, ignore_errors=True)
        layout.runtime.mkdir(parents=True, exist_ok=True)
        say(f"cleared the Site Runtimes' journals under {layout.runtime}")
    say("migrating the service databases")
    migrated = await migrate_all(say)
    say(f"migrated: {', '.join(migrated) or 'none'}")
    if "site_coordination" in migrated:
        await check_runtime_journals(layout, options, say)
    if vhost_of(options.amqp_url) == "/":
        raise PrepareError("the dev stack runs on its own RabbitMQ virtual host, never on `/` "
                           "(where `guest` has every right): set METALLO_DEV_AMQP_URL to e.g. "
                           "amqp://127.0.0.1:5672/metallo-dev, or leave it unset")
    try:
        users = await ensure_users(layout, options.amqp_url, SERVICES, options.topology_prefix)
    except BrokerUsersError as exc:
        raise PrepareError(str(exc)) from None
    say(f"RabbitMQ virtual host {vhost_of(options.amqp_url)}, users: {', '.join(users)}")
    notifications = await ensure_notifications_queue(
        options, broker_url(layout, options.amqp_url, GO_API))
    say(f"notifications queue: {notifications}")
    ca = await asyncio.to_thread(ensure_certificates, layout)
    say(f"development CA: {ca}")
    ensure_git_credentials(layout, options)
    key = ensure_issuer_key(layout, fresh=fresh)
    say(f"lab issuer key: {key}" + (" (new: log in again with `metallo dev login`)"
                                    if fresh and key.parent == layout.issuer else ""))
    say(f"lab issuer logins: {', '.join(await asyncio.to_thread(ensure_lab_accounts, layout))}")
    if options.kubernetes:
        # The Kubernetes lab runs Pods as member users: they read the CA (public) here.
        public = layout.root / "public"
        public.mkdir(mode=0o755, exist_ok=True)
        (public / "ca.pem").write_bytes(ca.read_bytes())
        (public / "ca.pem").chmod(0o644)
    return Prepared(migrated, ca)
