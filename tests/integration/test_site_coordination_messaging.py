"""AppendSiteCommand over RabbitMQ through the CommandServer, and the stream's
events through the outbox relay (seed 004 §4A; real PostgreSQL and RabbitMQ)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from metallo.common.v1 import common_pb2
from metallo.messaging import EventConsumer, OutboxRelay, Rejected, RequestClient
from metallo.site_coordination.v1 import site_coordination_pb2 as sc_pb2
from site_coordination.adaptors.command_handlers import build_command_server
from site_coordination.domain.canonical import canonical_json
from tests.integration.site_coordination_support import prepare_payload, result_for, start_harness


def _append(command_id: str, environment: str = "slurm") -> sc_pb2.AppendSiteCommand:
    return sc_pb2.AppendSiteCommand(
        metadata=common_pb2.CommandMetadata(command_id=command_id, acting_member="m-alice",
                                            project="demo"),
        site_id="lab-slurm", environment=environment, kind="prepare", run_id="run-1",
        attempt_id="att-1", attempt_number=1, payload_json=canonical_json(prepare_payload()),
    )


async def test_append_over_rabbitmq_and_events_through_the_outbox(
        make_database, tmp_path, namespace, topology, amqp_url, bus_url):
    edge = await start_harness(make_database, tmp_path, namespace)
    server = build_command_server(edge.engine, bus_url("site_coordination"), topology)
    relay = OutboxRelay(edge.engine, bus_url("site_coordination"), topology, owner="site_coordination")
    observer = EventConsumer("sc_observer", edge.engine, amqp_url, topology)
    received: list = []
    both = asyncio.Event()

    @observer.on(sc_pb2.SiteCommandAppended)
    async def appended(session, event):
        received.append(event)

    @observer.on(sc_pb2.SiteCommandResultRecorded)
    async def recorded(session, event):
        received.append(event)
        both.set()

    await observer.start()
    await server.start()
    await relay.start()
    client = RequestClient(bus_url("go_api"), topology)
    await client.start()
    try:
        command_id = uuid.uuid4().hex
        append = _append(command_id)
        reply = await client.request(append, timeout=20)
        assert (reply.command_id, reply.sequence) == (command_id, 1)
        again = await client.request(append, timeout=20)
        assert again.sequence == 1
        with pytest.raises(Rejected) as err:
            await client.request(_append(uuid.uuid4().hex, environment="vms"), timeout=20)
        assert err.value.code == "invalid-argument"

        http = edge.client(await edge.grant())
        command = (await http.get("/v1/commands/next")).json()
        assert command["command_id"] == command_id
        r = await http.post("/v1/commands/1/result", json=result_for(command))
        assert r.json() == {"recorded": True}
        await asyncio.wait_for(both.wait(), 30)
        await asyncio.sleep(0.5)  # an Appended event would have arrived before the result
        kinds = [type(e).__name__ for e in received]
        assert kinds == ["SiteCommandResultRecorded"]  # no SiteCommandAppended (ADR 0014)
        assert received[0].sequence == 1 and received[0].kind == "prepare"
        assert json.loads(received[0].result_json) == result_for(command)
    finally:
        await client.close()
        await relay.stop()
        await server.stop()
        await observer.stop()
        await edge.stop()
        await edge.engine.dispose()


def _after(command_id: str, after: str, attempt_id: str = "att-1") -> sc_pb2.AppendSiteCommand:
    command = _append(command_id)
    command.attempt_id = attempt_id
    command.after_command_id = after
    return command


async def test_a_command_that_overtook_its_predecessor_waits_for_it(
        make_database, tmp_path, namespace, topology, bus_url):
    """Replicas compete for one queue: the Attempt's second command may be handled before
    its first. It is retried until the first is in the stream, then appended after it."""
    edge = await start_harness(make_database, tmp_path, namespace)
    server = build_command_server(edge.engine, bus_url("site_coordination"), topology)
    relay = OutboxRelay(edge.engine, bus_url("site_coordination"), topology,
                        owner="site_coordination", poll_seconds=0.1)
    await relay.start()
    await server.start()
    client = RequestClient(bus_url("go_api"), topology)
    await client.start()
    try:
        first, second = uuid.uuid4().hex, uuid.uuid4().hex
        overtaking = asyncio.create_task(client.request(_after(second, first), timeout=30))
        await asyncio.sleep(1.5)  # handled and retried at least once meanwhile
        assert not overtaking.done()
        assert (await client.request(_append(first), timeout=20)).sequence == 1
        assert (await overtaking).sequence == 2
        with pytest.raises(Rejected) as err:  # a predecessor of another Attempt
            await client.request(_after(uuid.uuid4().hex, first, attempt_id="att-2"), timeout=20)
        assert err.value.code == "predecessor-mismatch"
        http = edge.client(await edge.grant())
        assert (await http.get("/v1/commands/next")).json()["command_id"] == first
    finally:
        await client.close()
        await relay.stop()
        await server.stop()
        await edge.stop()
        await edge.engine.dispose()
