"""Shared fixtures: throw-away PostgreSQL databases and an isolated RabbitMQ namespace.

The services are real (DESIGN.md): a test that cannot reach PostgreSQL at
127.0.0.1:5432 or RabbitMQ at 127.0.0.1:5672 fails; it is never skipped. RabbitMQ is
used on the session's own virtual host as the principals of ``tests/bus.py``, never
as ``guest``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from metallo.persistence.engine import database_url, drop_database, ensure_database
from metallo.persistence.migrations import migrate
from tests.bus import BUS

ROOT = Path(__file__).resolve().parent.parent
# Who may assert acting_member without a member token: ADR 0026's principals, as this
# session's users (tests/bus.py), never `guest`.
os.environ["METALLO_BUS_ASSERTERS"] = BUS.assertion_grants()


@pytest.fixture(scope="session", autouse=True)
def _test_bus():
    """Deletes the session's virtual host and users (made on first use) at the end."""
    yield BUS
    BUS.close()


@pytest.fixture
def amqp_url() -> str:
    """The harness principal's URL (tests/bus.py): test doubles, raw publishes and
    consumers, the messaging tests' testkit clients. Real services connect as their
    own principal (``bus_url``)."""
    return BUS.url("harness")


@pytest.fixture
def bus_url():
    """``bus_url(role)``: the URL of a session principal (a service, ``go_api``, ``cli``)."""
    return BUS.url


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
