"""Fixtures of the integration tests: a migrated ledger database (messaging), a
namespaced topology, and ``edge``: Site Coordination's HTTPS Site edge on its own
database (``site_coordination_support.start_harness``)."""

from __future__ import annotations

import aio_pika
import pytest

from metallo.messaging import Topology
from metallo.persistence.engine import create_engine
from tests.integration.ledger.service import MIGRATIONS
from tests.integration.site_coordination_support import start_harness


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


@pytest.fixture
async def edge(make_database, tmp_path, namespace):
    """A running Site edge harness (TLS, PostgreSQL, lab Git), stopped afterwards."""
    harness = await start_harness(make_database, tmp_path, namespace)
    yield harness
    await harness.stop()
    await harness.engine.dispose()
