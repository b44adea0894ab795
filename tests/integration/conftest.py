"""Fixtures for the messaging integration tests: a migrated ledger database."""

from __future__ import annotations

import aio_pika
import pytest

from metallo.messaging import Topology
from metallo.persistence.engine import create_engine
from tests.integration.ledger.service import MIGRATIONS


@pytest.fixture
async def ledger_engine(make_database):
    url = await make_database("ledger", MIGRATIONS)
    engine = create_engine(url)
    yield engine
    await engine.dispose()


@pytest.fixture
async def topology(namespace, amqp_url):
    """A namespaced Topology whose queues are deleted after the test."""
    topo = Topology(prefix=namespace)
    yield topo
    conn = await aio_pika.connect(amqp_url)
    async with conn:
        channel = await conn.channel()
        for name in topo.declared_queues:
            await channel.queue_delete(name)
        for name in (topo.events_exchange, topo.commands_exchange):
            await channel.exchange_delete(name)
