"""Shared fixtures: throw-away PostgreSQL databases and an isolated RabbitMQ namespace.

The services are real (DESIGN.md): a test that cannot reach PostgreSQL at
127.0.0.1:5432 or RabbitMQ at 127.0.0.1:5672 fails; it is never skipped.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from metallo.persistence.engine import database_url, drop_database, ensure_database
from metallo.persistence.migrations import migrate

ROOT = Path(__file__).resolve().parent.parent
AMQP_URL = os.environ.get("METALLO_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
# The tests run every service and client as RabbitMQ's `guest` in their own namespace,
# so they declare `guest` a principal that may assert acting_member — the operator
# setting of docs/operators.md (Trust boundaries). tests/integration/test_bus_trust.py
# checks the refusals with principals and settings of its own; the dev stack sets its own.
os.environ.setdefault("METALLO_BUS_ASSERTERS", "guest=*")


@pytest.fixture
def amqp_url() -> str:
    """The RabbitMQ URL the tests use."""
    return AMQP_URL


@pytest.fixture
def namespace() -> str:
    """A unique prefix for exchange and queue names, so tests never share topology."""
    return f"t{uuid.uuid4().hex[:10]}."


@pytest.fixture
async def make_database():
    """Factory: ``await make_database("execution_core", migrations_dir=None) -> url``.

    Creates a fresh ``test_<service>_<random>`` database (migrated to head when
    ``migrations_dir`` is given) and drops it after the test.
    """
    created: list[str] = []

    async def make(service: str, migrations_dir: Path | None = None) -> str:
        url = database_url(service, f"test_{service}_{uuid.uuid4().hex[:10]}")
        created.append(url)
        if migrations_dir is not None:
            await migrate(url, migrations_dir)
        else:
            await ensure_database(url)
        return url

    yield make
    for url in created:
        await drop_database(url)
