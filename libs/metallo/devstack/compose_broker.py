"""``python -m metallo.devstack compose-broker``: the one-shot ``broker-users`` service
of ``docker-compose.yml``, run before RabbitMQ starts.

It makes the compose stack's RabbitMQ principals as ``dev up`` makes the dev
stack's (``devstack.rabbitmq``): one user per service, the Go API and the CLI, each
with least-privilege permissions on the virtual host :data:`COMPOSE_VHOST`, and
writes

* the broker's definitions file (users with salted password hashes, permissions;
  no ``guest``), which RabbitMQ loads at boot: a broker whose definitions are
  loaded on boot creates no default user;
* each user's password alone in ``secrets/rabbitmq/<user>`` (0600) for
  ``METALLO_AMQP_PASSWORD_FILE``, and the CLI's login in
  ``secrets/rabbitmq-cli.json`` (0600).

Idempotent: stored passwords are reused, so a restart keeps every login.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from metallo.devstack.components import SERVICES
from metallo.devstack.layout import Layout, write_secret
from metallo.devstack.rabbitmq import (
    CLI,
    CLI_LOGIN_FILE,
    USERS_FILE,
    definitions,
    stack_principals,
    stored_passwords,
)

COMPOSE_VHOST = "metallo"
RABBITMQ_UID = 999  # the rabbitmq user of the official image


def password_file(layout: Layout, user: str) -> Path:
    """Where ``user``'s password is kept for ``METALLO_AMQP_PASSWORD_FILE``."""
    return layout.secrets / "rabbitmq" / user


def make_principals(directory: str, definitions_file: str) -> list[str]:
    """Write the definitions file and every password file; return the user names."""
    layout = Layout(Path(directory))
    layout.make()
    wanted = stack_principals(SERVICES, "")
    passwords = stored_passwords(layout)
    for name in wanted:
        passwords.setdefault(name, secrets.token_urlsafe(24))
    write_secret(layout.secrets / USERS_FILE, json.dumps(passwords, indent=1))
    write_secret(layout.secrets / CLI_LOGIN_FILE,
                 json.dumps({"username": CLI, "password": passwords[CLI]}))
    (layout.secrets / "rabbitmq").mkdir(mode=0o700, exist_ok=True)
    for name in wanted:
        write_secret(password_file(layout, name), passwords[name] + "\n")
    target = Path(definitions_file)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_secret(target, json.dumps(
        definitions({n: (passwords[n], perm) for n, perm in wanted.items()}, COMPOSE_VHOST),
        indent=1))
    if os.geteuid() == 0:  # the broker reads its definitions as its own user
        os.chown(target, RABBITMQ_UID, RABBITMQ_UID)
    return sorted(wanted)
