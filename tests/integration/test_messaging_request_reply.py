"""Typed request/reply over RabbitMQ with command receipts."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import pytest
from sqlalchemy import text

from metallo.common.v1 import common_pb2
from metallo.messaging import (
    OutboxRelay,
    OutcomeUncertain,
    Rejected,
    RequestClient,
    ServiceUnavailable,
)
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.ledger.service import ledger_server

pytestmark = pytest.mark.integration


def meta(command_id: str | None = None) -> common_pb2.CommandMetadata:
    return common_pb2.CommandMetadata(command_id=command_id or str(uuid.uuid4()), acting_member="m-alice", project="demo")


@pytest.fixture
async def ledger(ledger_engine, amqp_url, topology):
    server = ledger_server(ledger_engine, amqp_url, topology)
    await server.start()
    relay = OutboxRelay(ledger_engine, amqp_url, topology, owner="ledger", poll_seconds=0.05)
    await relay.start()
    client = RequestClient(amqp_url, topology)
    await client.start()
    yield client
    await client.close()
    await relay.stop()
    await server.stop()


async def balance(ledger_engine, account: str) -> int | None:
    async with ledger_engine.connect() as conn:
        return (await conn.execute(text("SELECT balance FROM accounts WHERE account = :a"), {"a": account})).scalar()


async def test_command_reply_and_query(ledger):
    reply = await ledger.request(tk.Deposit(metadata=meta(), account="acc", amount=5))
    assert isinstance(reply, tk.DepositReply) and reply.balance == 5
    q = await ledger.request(tk.GetBalance(metadata=common_pb2.QueryMetadata(acting_member="m", project="p"), account="acc"))
    assert isinstance(q, tk.Balance) and q.balance == 5


async def test_replay_returns_saved_outcome_and_conflict_is_rejected(ledger, ledger_engine):
    cid = str(uuid.uuid4())
    first = await ledger.request(tk.Deposit(metadata=meta(cid), account="r", amount=3))
    again = await ledger.request(tk.Deposit(metadata=meta(cid), account="r", amount=3))
    assert first == again and again.balance == 3
    assert await balance(ledger_engine, "r") == 3  # applied once
    with pytest.raises(Rejected) as conflict:
        await ledger.request(tk.Deposit(metadata=meta(cid), account="r", amount=4))
    assert conflict.value.code == "idempotency-conflict"
    assert await balance(ledger_engine, "r") == 3


async def test_rejection_rolls_back_and_is_saved(ledger, ledger_engine):
    cid = str(uuid.uuid4())
    for _ in range(2):
        with pytest.raises(Rejected) as exc:
            await ledger.request(tk.Deposit(metadata=meta(cid), account="neg", amount=-1))
        assert exc.value.code == "invalid-argument" and exc.value.details == {"field": "amount"}
    async with ledger_engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM command_receipts WHERE command_id = :c"), {"c": cid})).scalar() == 1
    assert await balance(ledger_engine, "neg") is None


async def test_transient_rejection_is_replied_but_not_saved(ledger, ledger_engine):
    cid = str(uuid.uuid4())
    with pytest.raises(Rejected) as exc:
        await ledger.request(tk.Deposit(metadata=meta(cid), account="busy", amount=1))
    assert exc.value.code == "dependency-unavailable" and exc.value.details["transient"] == "true"
    async with ledger_engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM command_receipts"))).scalar() == 0


async def test_failing_handler_sends_no_success_reply(ledger, ledger_engine, topology, amqp_url):
    with pytest.raises(OutcomeUncertain):
        await ledger.request(tk.Deposit(metadata=meta(), account="explode", amount=1), timeout=1.5)
    assert await balance(ledger_engine, "explode") is None
    async with ledger_engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM command_receipts"))).scalar() == 0
        assert (await conn.execute(text("SELECT count(*) FROM outbox_messages"))).scalar() == 0


async def test_poison_message_is_dead_lettered_and_queue_keeps_flowing(ledger, topology, amqp_url):
    conn = await aio_pika.connect(amqp_url)
    async with conn:
        ch = await conn.channel()
        ex = await ch.get_exchange(topology.commands_exchange)
        base = dict(content_type="application/x-protobuf", message_id=str(uuid.uuid4()), headers={"contract-version": "v1"})
        await ex.publish(aio_pika.Message(b"\xff\xff\xff", type="metallo.testkit.v1.Deposit", **base), "testkit.command.Deposit")
        await ex.publish(aio_pika.Message(b"", type="metallo.testkit.v1.Nope", **{**base, "message_id": str(uuid.uuid4())}), "testkit.command.Nope")
        wrong = {**base, "message_id": str(uuid.uuid4()), "headers": {"contract-version": "v9"}}
        await ex.publish(aio_pika.Message(b"", type="metallo.testkit.v1.Deposit", **wrong), "testkit.command.Deposit")
        reply = await ledger.request(tk.Deposit(metadata=meta(), account="after-poison", amount=1))
        assert reply.balance == 1
        dlq = await ch.declare_queue(topology.command_queue("testkit") + ".dlq", durable=True, passive=True)
        reasons = []
        for _ in range(100):
            msg = await dlq.get(fail=False, no_ack=True)
            if msg is None:
                if len(reasons) == 3:
                    break
                await asyncio.sleep(0.1)
                continue
            reasons.append(msg.headers["x-metallo-dead-reason"])
    assert len(reasons) == 3
    assert any("does not decode" in r for r in reasons)
    assert any("unknown message type" in r for r in reasons)
    assert any("contract-version" in r for r in reasons)


async def test_fifty_concurrent_requests_from_one_client(ledger, ledger_engine):
    replies = await asyncio.gather(
        *(ledger.request(tk.Deposit(metadata=meta(), account=f"c{i % 5}", amount=1), timeout=30) for i in range(50))
    )
    assert len(replies) == 50
    assert sorted(r.balance for r in replies if r.account == "c0") == list(range(1, 11))
    assert await balance(ledger_engine, "c3") == 10


async def test_two_client_processes_get_their_own_replies(ledger, amqp_url, topology):
    other = RequestClient(amqp_url, topology)
    await other.start()
    try:
        a, b = await asyncio.gather(
            ledger.request(tk.Deposit(metadata=meta(), account="two-a", amount=2)),
            other.request(tk.Deposit(metadata=meta(), account="two-b", amount=7)),
        )
        assert (a.account, a.balance, b.account, b.balance) == ("two-a", 2, "two-b", 7)
    finally:
        await other.close()


async def test_request_to_a_service_that_never_started(amqp_url, topology):
    client = RequestClient(amqp_url, topology)
    await client.start()
    try:
        with pytest.raises(ServiceUnavailable, match="is the testkit service running"):
            await client.request(tk.Deposit(metadata=meta(), account="x", amount=1), timeout=3)
    finally:
        await client.close()


async def test_timeout_with_the_service_down_says_so(amqp_url, topology):
    """The owner's queue exists but nothing consumes it: uncertain, and the message says why."""
    from metallo.messaging.broker import durable_queue, make_broker, topic_exchange

    broker = make_broker(amqp_url)
    await broker.connect()
    exchange = await broker.declare_exchange(topic_exchange(topology.commands_exchange))
    queue = await broker.declare_queue(durable_queue(topology.command_queue("testkit")))
    await queue.bind(exchange, routing_key="testkit.command.#")
    await broker.stop()
    topology.declared_queues.add(topology.command_queue("testkit"))
    client = RequestClient(amqp_url, topology)
    await client.start()
    try:
        with pytest.raises(OutcomeUncertain, match="no testkit service is consuming"):
            await client.request(tk.Deposit(metadata=meta(), account="x", amount=1), timeout=1)
    finally:
        await client.close()
