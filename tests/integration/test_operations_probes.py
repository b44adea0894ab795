"""The operations endpoint of a service process: /healthz answers while the loop
runs; /readyz is 200 only with the database reachable, migrations at head and
every queue consumer attached on a live RabbitMQ connection, else 503 naming the
check; /metrics serves the Prometheus text format. Real PostgreSQL and RabbitMQ."""

from __future__ import annotations

import httpx
import pytest

from metallo.operations.readiness import Readiness, service_readiness
from metallo.operations.server import OpsServer
from metallo.persistence.engine import create_engine
from tests.integration.ledger.service import MIGRATIONS, ledger_server

pytestmark = pytest.mark.integration


async def get(ops: OpsServer, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ops.port}", timeout=10) as client:
        return await client.get(path)


@pytest.fixture
async def ops_for(ledger_engine, amqp_url, topology):
    """Factory: an OpsServer on a loopback port for the ledger's CommandServer."""
    started: list[OpsServer] = []

    async def make(engine=ledger_engine, server=None) -> OpsServer:
        server = server or ledger_server(ledger_engine, amqp_url, topology)
        ops = OpsServer("ledger", service_readiness(engine, MIGRATIONS, lambda: server.queue_consumers),
                        address=("127.0.0.1", 0))
        await ops.start()
        started.append(ops)
        return ops

    yield make
    for ops in started:
        await ops.stop()


async def test_ready_only_while_consumers_are_attached(ops_for, ledger_engine, amqp_url, topology):
    server = ledger_server(ledger_engine, amqp_url, topology)
    ops = await ops_for(server=server)
    assert (await get(ops, "/healthz")).json() == {"status": "alive", "service": "ledger"}
    before = await get(ops, "/readyz")
    assert before.status_code == 503
    assert before.json()["checks"]["consumers"] == "no queue consumer started"
    assert before.json()["checks"]["database"] == "ok"
    await server.start()
    try:
        ready = await get(ops, "/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"ready": True, "service": "ledger", "checks": {
            "database": "ok", "migrations": "ok", "broker": "ok", "consumers": "ok"}}
    finally:
        await server.stop()
    after = await get(ops, "/readyz")
    assert after.status_code == 503
    assert after.json()["checks"]["consumers"].startswith("not consuming ")


async def test_unmigrated_database_is_not_ready(ops_for, make_database, amqp_url, topology,
                                                ledger_engine):
    bare = create_engine(await make_database("ledger"))
    server = ledger_server(ledger_engine, amqp_url, topology)
    await server.start()
    try:
        ops = await ops_for(engine=bare, server=server)
        answer = await get(ops, "/readyz")
        assert answer.status_code == 503
        checks = answer.json()["checks"]
        assert checks["database"] == "ok" and checks["consumers"] == "ok"
        assert "alembic_version" in checks["migrations"], checks
    finally:
        await server.stop()
        await bare.dispose()


async def test_unreachable_database_is_not_ready(ops_for):
    gone = create_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    try:
        ops = await ops_for(engine=gone)
        answer = await get(ops, "/readyz")
        assert answer.status_code == 503
        assert answer.json()["checks"]["database"] != "ok"
    finally:
        await gone.dispose()


async def test_metrics_are_prometheus_text():
    ops = OpsServer("bare", Readiness(), address=("127.0.0.1", 0))
    await ops.start()
    try:
        answer = await get(ops, "/metrics")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain")
        assert "# TYPE python_info gauge" in answer.text
        ready = await get(ops, "/readyz")
        assert ready.status_code == 200 and ready.json()["checks"] == {}
    finally:
        await ops.stop()


async def test_a_taken_address_is_a_clear_error():
    first = OpsServer("first", Readiness(), address=("127.0.0.1", 0))
    await first.start()
    try:
        with pytest.raises(OSError, match="METALLO_OPS_ADDRESS"):
            await OpsServer("second", Readiness(), address=("127.0.0.1", first.port)).start()
    finally:
        await first.stop()
