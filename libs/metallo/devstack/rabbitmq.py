"""RabbitMQ principals of the dev stack: one user per service and one for the Go API,
each allowed only its own queues and exchanges (docs/operators.md, Trust boundaries).

``ensure_users`` imports the users and their permissions with ``rabbitmqctl
import_definitions`` reading standard input (as root on the RabbitMQ host): the
passwords never appear on a command line, in a file RabbitMQ reads, or in a log.
They are kept in ``secrets/rabbitmq-users.json`` (mode 0600) and reused by the
next ``dev up``. RabbitMQ stores only salted SHA-256 hashes.

Permission patterns (configure / write / read, regular expressions over
exchange and queue names, under the topology prefix ``P``):

* a service ``ctx``: configure and read ``P(metallo.commands|metallo.events|ctx.*|
  metallo.reply.*)``; write the same plus ``amq.default`` (replies and retries go
  through the default exchange);
* the Go API (and any member client, e.g. ``metallo-cli``): configure and read its
  reply queues ``Pmetallo.reply.*`` and the commands exchange, write only
  ``Pmetallo.commands``.
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
from urllib.parse import quote, urlsplit, urlunsplit

from metallo.devstack.layout import Layout, write_secret

GO_API = "metallo-go-api"
CLI = "metallo-cli"
USERS_FILE = "rabbitmq-users.json"


def principal(service: str) -> str:
    """The RabbitMQ user of ``service`` (``execution_core`` → ``metallo-execution-core``)."""
    return "metallo-" + service.replace("_", "-")


@dataclass(frozen=True)
class Permissions:
    """One user's configure / write / read patterns on a vhost."""

    configure: str
    write: str
    read: str


def service_permissions(service: str, prefix: str = "") -> Permissions:
    """Least privilege of ``service``: its own queues, the two exchanges, reply queues."""
    p = re.escape(prefix)
    own = (rf"^{p}(metallo\.commands|metallo\.events|{re.escape(service)}\..*"
           rf"|metallo\.reply\..*)$")
    return Permissions(configure=own, write=own + r"|^amq\.default$", read=own)


def client_permissions(prefix: str = "") -> Permissions:
    """A requester that owns nothing (the Go API, a member client): publish commands and
    queries, consume its own reply queues."""
    p = re.escape(prefix)
    return Permissions(configure=rf"^{p}(metallo\.commands|metallo\.reply\..*)$",
                       write=rf"^{p}metallo\.commands$",
                       read=rf"^{p}(metallo\.commands|metallo\.reply\..*)$")


def password_hash(password: str) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256``: base64(salt ‖ sha256(salt ‖ password))."""
    salt = secrets.token_bytes(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def definitions(users: dict[str, tuple[str, Permissions]], vhost: str = "/") -> dict:
    """The ``import_definitions`` document for ``{name: (password, permissions)}``."""
    return {
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


def stack_principals(services: tuple[str, ...], prefix: str) -> dict[str, Permissions]:
    """Every dev-stack user and its permissions: the services, the Go API, the CLI."""
    users = {principal(s): service_permissions(s, prefix) for s in services}
    users[GO_API] = client_permissions(prefix)
    users[CLI] = client_permissions(prefix)
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
                       prefix: str = "") -> list[str]:
    """Create (or update) every dev-stack user with its permissions; return their names."""
    wanted = stack_principals(services, prefix)
    passwords = stored_passwords(layout)
    for name in wanted:
        passwords.setdefault(name, secrets.token_urlsafe(24))
    write_secret(layout.secrets / USERS_FILE, json.dumps(passwords, indent=1))
    vhost = urlsplit(amqp_url).path.lstrip("/") or "/"
    document = definitions({n: (passwords[n], perm) for n, perm in wanted.items()}, vhost)
    await asyncio.to_thread(import_definitions, document)
    for name in wanted:
        await wait_until_accepted(with_user(amqp_url, name, passwords[name]))
    return sorted(wanted)
