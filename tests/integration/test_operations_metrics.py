"""Process and database metrics on real RabbitMQ and PostgreSQL: commands and queries
counted by outcome and code, failed deliveries retried then dead-lettered, the
outbox backlog read at scrape time, and native requests timed through httpx."""

from __future__ import annotations

import asyncio
import re
import uuid

import aio_pika
import httpx
import pytest
from prometheus_client import REGISTRY

from metallo.common.v1 import common_pb2
from metallo.messaging import OutboxRelay, Rejected, RequestClient
from metallo.messaging.errors import OutcomeUncertain
from metallo.operations.http_metrics import measure_client
from metallo.operations.metrics import outbox_collector
from metallo.operations.readiness import Readiness
from metallo.operations.server import OpsServer
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.ledger.service import ledger_server

pytestmark = pytest.mark.integration
DEPOSIT = "metallo.testkit.v1.Deposit"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def meta() -> common_pb2.CommandMetadata:
    return common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member="m-alice",
                                      project="demo")


async def test_requests_are_counted_by_outcome_and_code(ledger_engine, amqp_url, topology):
    server = ledger_server(ledger_engine, amqp_url, topology)
    await server.start()
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="ledger", poll_seconds=0.05)
    await relay.start()
    queue = topology.command_queue("testkit")
    before = {
        "accepted": sample("metallo_requests_total", service="testkit", kind="command",
                           message=DEPOSIT, outcome="accepted", code=""),
        "rejected": sample("metallo_requests_total", service="testkit", kind="command",
                           message=DEPOSIT, outcome="rejected", code="invalid-argument"),
        "failed": sample("metallo_requests_total", service="testkit", kind="command",
                         message=DEPOSIT, outcome="failed", code=""),
        "timed": sample("metallo_request_seconds_count", service="testkit", kind="command",
                        message=DEPOSIT),
        "retried": sample("metallo_deliveries_retried_total", queue=queue),
    }
    try:
        async with RequestClient(amqp_url, topology) as client:
            await client.request(tk.Deposit(metadata=meta(), account="a", amount=2))
            with pytest.raises(Rejected):
                await client.request(tk.Deposit(metadata=meta(), account="a", amount=-1))
            with pytest.raises(OutcomeUncertain):  # the handler raises: retried, no reply
                await client.request(tk.Deposit(metadata=meta(), account="explode", amount=1),
                                     timeout=1.5)
            query = tk.GetBalance(metadata=common_pb2.QueryMetadata(acting_member="m",
                                                                     project="p"), account="a")
            await client.request(query)
    finally:
        await relay.stop()
        await server.stop()
    assert sample("metallo_requests_total", service="testkit", kind="command", message=DEPOSIT,
                  outcome="accepted", code="") == before["accepted"] + 1
    assert sample("metallo_requests_total", service="testkit", kind="command", message=DEPOSIT,
                  outcome="rejected", code="invalid-argument") == before["rejected"] + 1
    assert sample("metallo_requests_total", service="testkit", kind="command", message=DEPOSIT,
                  outcome="failed", code="") >= before["failed"] + 1
    assert sample("metallo_request_seconds_count", service="testkit", kind="command",
                  message=DEPOSIT) >= before["timed"] + 3
    assert sample("metallo_requests_total", service="testkit", kind="query",
                  message="metallo.testkit.v1.GetBalance", outcome="accepted", code="") >= 1
    assert sample("metallo_deliveries_retried_total", queue=queue) >= before["retried"] + 1


async def test_outbox_backlog_is_read_at_scrape_time(ledger_engine, amqp_url, topology):
    server = ledger_server(ledger_engine, amqp_url, topology)
    await server.start()
    connection = await aio_pika.connect(amqp_url)
    channel = await connection.channel()
    events = await channel.declare_exchange(topology.events_exchange, "topic", durable=True)
    # The Deposited event routes here.
    watcher = await channel.declare_queue(f"{topology.prefix}watcher", exclusive=True)
    await watcher.bind(events, "testkit.#")
    ops = OpsServer("ledger", Readiness(), address=("127.0.0.1", 0),
                    collectors=[outbox_collector("ledger", ledger_engine)])
    await ops.start()
    try:
        async with RequestClient(amqp_url, topology) as client, \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{ops.port}") as http:
            # No relay yet: the reply and the event wait in the outbox.
            pending = asyncio.ensure_future(client.request(
                tk.Deposit(metadata=meta(), account="b", amount=1), timeout=30))
            for _ in range(100):
                text = (await http.get("/metrics")).text
                if 'metallo_outbox_backlog{service="ledger"} 2.0' in text:
                    break
                await asyncio.sleep(0.1)
            assert 'metallo_outbox_backlog{service="ledger"} 2.0' in text, text[-1500:]
            oldest = re.search(r'^metallo_outbox_oldest_seconds\{service="ledger"\} (\S+)$', text,
                               re.MULTILINE)
            assert oldest is not None and float(oldest.group(1)) > 0, text[-1500:]
            relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="ledger",
                                poll_seconds=0.05)
            await relay.start()
            try:
                assert (await pending).balance == 1
                for _ in range(100):
                    text = (await http.get("/metrics")).text
                    if 'metallo_outbox_backlog{service="ledger"} 0.0' in text:
                        break
                    await asyncio.sleep(0.1)
            finally:
                await relay.stop()
            assert 'metallo_outbox_backlog{service="ledger"} 0.0' in text
            assert 'metallo_outbox_oldest_seconds{service="ledger"} 0.0' in text
            assert 'metallo_outbox_dead{service="ledger"} 0.0' in text
    finally:
        await ops.stop()
        await server.stop()
        await connection.close()


async def test_native_requests_are_timed_and_failures_counted():
    ops = OpsServer("target", Readiness(), address=("127.0.0.1", 0))
    await ops.start()
    labels = {"target": "probe-test", "method": "GET"}
    before = sample("metallo_native_request_seconds_count", **labels)
    errors = sample("metallo_native_request_errors_total", **labels)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ops.port}") as client:
            measure_client(client, "probe-test")
            assert (await client.get("/healthz")).status_code == 200
            assert sample("metallo_native_request_seconds_count", **labels) == before + 1
            assert sample("metallo_native_request_errors_total", **labels) == errors
    finally:
        await ops.stop()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ops.port}") as client:
        measure_client(client, "probe-test")
        with pytest.raises(httpx.ConnectError):
            await client.get("/healthz")
    assert sample("metallo_native_request_errors_total", **labels) == errors + 1
