"""The dev stack's RabbitMQ principals on its own virtual host (``devstack.rabbitmq``,
ADR 0030): ``guest`` cannot open it; each service reads only its own queues; a member
client cannot bind a queue to the commands exchange (so never reads other requesters'
commands and their tokens) nor consume a service's queue.

``ensure_users`` runs as ``dev up`` runs it, on a virtual host and with user names of
this test's own (the dev stack's real users are left alone), deleted afterwards.
"""

from __future__ import annotations

import json
import stat
import uuid

import aio_pika
import aiormq
import pytest

from metallo.devstack.components import SERVICES
from metallo.devstack.layout import Layout
from metallo.devstack.rabbitmq import (
    CLI_LOGIN_FILE,
    broker_url,
    delete_user,
    delete_vhost,
    ensure_users,
    principal,
    stored_passwords,
    with_user,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def stack_broker(tmp_path):
    """(layout, base URL, user prefix) after ``ensure_users`` on a fresh virtual host."""
    tag = uuid.uuid4().hex[:10]
    vhost, user_prefix = f"metallo-devtest-{tag}", f"dt{tag}-"
    base = f"amqp://127.0.0.1:5672/{vhost}"
    layout = Layout(tmp_path / "dev")
    layout.make()
    names = await ensure_users(layout, base, SERVICES, "", user_prefix)
    try:
        yield layout, base, user_prefix
    finally:
        delete_vhost(vhost)
        for name in names:
            delete_user(name)


async def refused(coro) -> str:
    with pytest.raises(aiormq.exceptions.AMQPError) as closed:
        await coro
    return str(closed.value)


async def ignore(message) -> None:
    """A consumer that never gets a message (the consume is refused)."""


async def test_guest_cannot_open_the_stacks_virtual_host(stack_broker):
    _layout, base, _prefix = stack_broker
    assert "Connection.Close" in await refused(
        aio_pika.connect(with_user(base, "guest", "guest"), timeout=10))


async def test_each_principal_reaches_only_its_own_names(stack_broker):
    layout, base, prefix = stack_broker
    core = await aio_pika.connect(broker_url(layout, base, principal("execution_core", prefix)))
    cli = await aio_pika.connect(broker_url(layout, base, principal("cli", prefix)))
    try:
        channel = await core.channel()
        commands = await channel.declare_exchange("metallo.commands", aio_pika.ExchangeType.TOPIC,
                                                  durable=True)
        own = await channel.declare_queue("execution_core.commands", durable=True)
        await own.bind(commands, "execution_core.command.#")
        # Another service's queue: Execution Core may not even declare it.
        assert "ACCESS_REFUSED" in await refused(
            (await core.channel()).declare_queue("workload_portfolio.commands", durable=True))
        # The member client may publish a request and keep a reply queue...
        client = await cli.channel()
        await client.declare_queue("metallo.reply.probe", exclusive=True)
        # ...but not consume a service's queue, nor bind its queue to the commands exchange.
        assert "ACCESS_REFUSED" in await refused(
            (await (await cli.channel()).get_queue("execution_core.commands")).consume(ignore))
        snoop = await (await cli.channel()).declare_queue("metallo.reply.snoop", exclusive=True)
        assert "ACCESS_REFUSED" in await refused(snoop.bind("metallo.commands", "#"))
    finally:
        await core.close()
        await cli.close()


async def test_the_cli_login_is_kept_alone_and_0600(stack_broker):
    layout, _base, prefix = stack_broker
    path = layout.secrets / CLI_LOGIN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert set(stored_passwords(layout)) == {principal(s, prefix) for s in
                                             (*SERVICES, "go_api", "cli")}
    login = json.loads(path.read_text())
    assert login == {"username": principal("cli", prefix),
                     "password": stored_passwords(layout)[principal("cli", prefix)]}
