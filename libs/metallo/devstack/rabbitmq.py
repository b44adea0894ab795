"""RabbitMQ principals of the dev stack: one user per service and one for the Go API,
each allowed only its own queues and exchanges (docs/operators.md, Trust boundaries).

The stack runs on its own virtual host (:data:`DEV_VHOST`, ADR 0030) on which only
these users have permissions: the broker's ``guest`` has none there, so a local
process logging in as ``guest`` can neither read the stack's queues nor publish a
command to it. ``guest`` on ``/`` is left as the machine has it.

``ensure_users`` imports the users and their permissions with ``rabbitmqctl
import_definitions`` reading standard input (as root on the RabbitMQ host): the
passwords never appear on a command line, in a file RabbitMQ reads, or in a log.
They are kept in ``secrets/rabbitmq-users.json`` (mode 0600) and reused by the
next ``dev up``; the CLI's own login alone is also written to
``secrets/rabbitmq-cli.json`` (0600), which ``metallo`` reads. RabbitMQ stores
only salted SHA-256 hashes.

Permission patterns (configure / write / read, regular expressions over
exchange and queue names, under the topology prefix ``P``):

* a service ``ctx``: configure and read ``P(metallo.commands|metallo.events|ctx.*|
  metallo.reply.*)``; write the same plus ``amq.default`` (replies and retries go
  through the default exchange);
* a member client (``metallo-cli``): configure its reply queues ``Pmetallo.reply.*``
  and the commands exchange, read only its reply queues, write only
  ``Pmetallo.commands``: it cannot bind a queue to either exchange, so it never
  sees another requester's commands (and their member tokens) or the events;
* the Go API: the same, plus its event bridge queue ``Papi_notifications.*`` bound
  to ``Pmetallo.events`` (configure and read the exchange, all three on the queue).

``prefix`` is a literal topology prefix; ``prefix_regex`` (tests) a regular
expression every prefix of a family of namespaces matches.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from metallo.devstack.layout import Layout, write_secret

GO_API = "metallo-go-api"
CLI = "metallo-cli"
USERS_FILE = "rabbitmq-users.json"
CLI_LOGIN_FILE = "rabbitmq-cli.json"
DEV_VHOST = "metallo-dev"
DEV_AMQP_URL = f"amqp://127.0.0.1:5672/{DEV_VHOST}"


def principal(service: str, user_prefix: str = "metallo-") -> str:
    """The RabbitMQ user of ``service`` (``execution_core`` → ``metallo-execution-core``)."""
    return user_prefix + service.replace("_", "-")


@dataclass(frozen=True)
class Permissions:
    """One user's configure / write / read patterns on a vhost."""

    configure: str
    write: str
    read: str


def _prefix(prefix: str, prefix_regex: str | None) -> str:
    return prefix_regex if prefix_regex is not None else re.escape(prefix)


def service_permissions(service: str, prefix: str = "", *,
                        prefix_regex: str | None = None) -> Permissions:
    """Least privilege of ``service``: its own queues, the two exchanges, reply queues."""
    p = _prefix(prefix, prefix_regex)
    own = (rf"^{p}(metallo\.commands|metallo\.events|{re.escape(service)}\..*"
           rf"|metallo\.reply\..*)$")
    return Permissions(configure=own, write=own + r"|^amq\.default$", read=own)


def client_permissions(prefix: str = "", *, prefix_regex: str | None = None) -> Permissions:
    """A requester that owns nothing (a member client): publish commands and queries,
    consume its own reply queues; no binding to any exchange."""
    p = _prefix(prefix, prefix_regex)
    return Permissions(configure=rf"^{p}(metallo\.commands|metallo\.reply\..*)$",
                       write=rf"^{p}metallo\.commands$",
                       read=rf"^{p}metallo\.reply\..*$")


def go_api_permissions(prefix: str = "", *, prefix_regex: str | None = None) -> Permissions:
    """The Go API: a requester (:func:`client_permissions`) that also keeps its event
    bridge queue ``api_notifications.*`` bound to the events exchange."""
    p = _prefix(prefix, prefix_regex)
    return Permissions(
        configure=rf"^{p}(metallo\.commands|metallo\.events|metallo\.reply\..*|api_notifications\..*)$",
        write=rf"^{p}(metallo\.commands|api_notifications\..*)$",
        read=rf"^{p}(metallo\.events|metallo\.reply\..*|api_notifications\..*)$")


def password_hash(password: str) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256``: base64(salt ‖ sha256(salt ‖ password))."""
    salt = secrets.token_bytes(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def definitions(users: dict[str, tuple[str, Permissions]], vhost: str = "/") -> dict:
    """The ``import_definitions`` document for ``{name: (password, permissions)}`` on
    ``vhost`` (created when missing; no other user gets a permission there)."""
    return {
        "vhosts": [{"name": vhost}],
        "users": [{"name": n, "password_hash": password_hash(pw), "tags": [],
                   "hashing_algorithm": "rabbit_password_hashing_sha256"}
                  for n, (pw, _perm) in users.items()],
        "permissions": [{"user": n, "vhost": vhost, "configure": perm.configure,
                         "write": perm.write, "read": perm.read}
                        for n, (_pw, perm) in users.items()],
    }


class BrokerUsersError(Exception):
    """The users could not be created; the message says what to do."""


def import_definitions(document: dict, *, timeout: float = 60.0) -> None:
    """Feed ``document`` to ``rabbitmqctl import_definitions`` on standard input."""
    tool = shutil.which("rabbitmqctl")
    if tool is None:
        raise BrokerUsersError("rabbitmqctl is not installed: the dev stack creates its RabbitMQ "
                               "users with it (run on the RabbitMQ host, as root)")
    try:
        done = subprocess.run([tool, "import_definitions", "--format", "json"],
                              input=json.dumps(document), capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerUsersError(f"rabbitmqctl import_definitions failed: {exc}") from None
    if done.returncode != 0:
        raise BrokerUsersError("rabbitmqctl import_definitions failed (run `metallo dev up` as "
                               f"root on the RabbitMQ host): {done.stderr.strip()[-300:]}")


def delete_user(name: str) -> None:
    """``rabbitmqctl delete_user name`` (for tests that made their own users)."""
    tool = shutil.which("rabbitmqctl") or "rabbitmqctl"
    subprocess.run([tool, "delete_user", name], capture_output=True, timeout=60, check=False)


def delete_vhost(name: str) -> None:
    """``rabbitmqctl delete_vhost name`` with its queues (for tests that made their own)."""
    if name in ("/", ""):
        raise ValueError("the default virtual host is never deleted")
    tool = shutil.which("rabbitmqctl") or "rabbitmqctl"
    subprocess.run([tool, "delete_vhost", name], capture_output=True, timeout=60, check=False)


def vhost_of(amqp_url: str) -> str:
    """The virtual host an AMQP URL names (``/`` when its path is empty)."""
    return unquote(urlsplit(amqp_url).path[1:]) or "/"


def with_user(amqp_url: str, user: str, password: str) -> str:
    """``amqp_url`` with its credentials replaced by ``user``/``password``."""
    parts = urlsplit(amqp_url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, parts.fragment))


async def wait_until_accepted(url: str, seconds: float = 20.0) -> None:
    """Connect with ``url`` until RabbitMQ accepts it (``import_definitions`` is
    asynchronous); raise BrokerUsersError when it never does."""
    import aio_pika

    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            connection = await aio_pika.connect(url, timeout=5)
        except Exception as exc:  # noqa: BLE001 - any refusal: wait and try again
            if asyncio.get_running_loop().time() > deadline:
                raise BrokerUsersError(f"RabbitMQ did not accept the new users ({type(exc).__name__})") from None
            await asyncio.sleep(0.3)
            continue
        await connection.close()
        return


def stack_principals(services: tuple[str, ...], prefix: str,
                     user_prefix: str = "metallo-") -> dict[str, Permissions]:
    """Every dev-stack user and its permissions: the services, the Go API, the CLI
    (``user_prefix`` other than ``metallo-``: a test's own users)."""
    users = {principal(s, user_prefix): service_permissions(s, prefix) for s in services}
    users[principal("go_api", user_prefix)] = go_api_permissions(prefix)
    users[principal("cli", user_prefix)] = client_permissions(prefix)
    return users


def stored_passwords(layout: Layout) -> dict[str, str]:
    """The passwords ``ensure_users`` keeps (``{}`` before the first ``dev up``)."""
    try:
        data = json.loads((layout.secrets / USERS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def broker_url(layout: Layout, amqp_url: str, user: str) -> str:
    """The URL ``user`` connects with (its stored password on ``amqp_url``'s host).

    Raises BrokerUsersError when ``dev up`` has not created the user yet."""
    password = stored_passwords(layout).get(user)
    if password is None:
        raise BrokerUsersError(f"no RabbitMQ password for {user} in {layout.secrets / USERS_FILE}; "
                               "`metallo dev up` creates it")
    return with_user(amqp_url, user, password)


async def ensure_users(layout: Layout, amqp_url: str, services: tuple[str, ...],
                       prefix: str = "", user_prefix: str = "metallo-") -> list[str]:
    """Create (or update) every dev-stack user with its permissions on ``amqp_url``'s
    virtual host (created when missing); return their names."""
    wanted = stack_principals(services, prefix, user_prefix)
    passwords = stored_passwords(layout)
    for name in wanted:
        passwords.setdefault(name, secrets.token_urlsafe(24))
    write_secret(layout.secrets / USERS_FILE, json.dumps(passwords, indent=1))
    cli = principal("cli", user_prefix)
    write_secret(layout.secrets / CLI_LOGIN_FILE,
                 json.dumps({"username": cli, "password": passwords[cli]}))
    vhost = vhost_of(amqp_url)
    document = definitions({n: (passwords[n], perm) for n, perm in wanted.items()}, vhost)
    await asyncio.to_thread(import_definitions, document)
    for name in wanted:
        await wait_until_accepted(with_user(amqp_url, name, passwords[name]))
    return sorted(wanted)
