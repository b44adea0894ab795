"""Test support for the dev stack's plan: the RabbitMQ users file ``metallo dev up``
writes (``secrets/rabbitmq-users.json``), with made-up passwords."""

from __future__ import annotations

import json

from metallo.devstack.components import SERVICES
from metallo.devstack.layout import Layout, write_secret
from metallo.devstack.rabbitmq import USERS_FILE, principal


def with_broker_users(layout: Layout) -> Layout:
    """``layout`` made, with a password for each service's RabbitMQ user; returns it."""
    layout.make()
    write_secret(layout.secrets / USERS_FILE,
                 json.dumps({principal(s): f"pw-{s}" for s in SERVICES}))
    return layout
