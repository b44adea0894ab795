"""Ordered commands and exactly-once results over the real HTTPS Site edge
(seed 004 §4A; real PostgreSQL, TLS, uvicorn)."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import select

from metallo.messaging.schema import outbox_messages
from site_coordination.adaptors.tables import site_commands, site_streams
from site_coordination.domain.errors import Conflict
from tests.integration.site_coordination_support import prepare_payload, result_for


async def test_commands_come_in_order_and_repeat_until_their_result(edge):
    secret = await edge.grant()
    for kind in ("prepare", "start", "observe"):
        await edge.append(kind, payload=prepare_payload() if kind == "prepare" else {})
    client = edge.client(secret)
    first = (await client.get("/v1/commands/next")).json()
    again = (await client.get("/v1/commands/next")).json()
    assert (first["sequence"], first["kind"]) == (1, "prepare")
    assert again == first
    assert first["site_id"] == "lab-slurm" and first["environment"] == "slurm"
    assert first["payload"]["member"]["site_username"] == "alice"
    r = await client.post("/v1/commands/1/result", json=result_for(first))
    assert r.status_code == 200 and r.json() == {"recorded": True}
    second = (await client.get("/v1/commands/next")).json()
    assert (second["sequence"], second["kind"]) == (2, "start")
    # The identical result again: accepted, not recorded twice.
    r = await client.post("/v1/commands/1/result", json=result_for(first))
    assert r.json() == {"recorded": False}
    # A different result for a recorded command is a conflict.
    r = await client.post("/v1/commands/1/result", json=result_for(first, phase="failed"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "result-conflict"


async def test_result_for_an_undelivered_command_is_refused_and_changes_nothing(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    await edge.append("start")
    client = edge.client(secret)
    # Sequence 1 was never pulled: not delivered.
    r = await client.get("/v1/commands/next?wait=0")
    one = r.json()
    async with edge.engine.connect() as conn:
        two_id = (await conn.execute(select(site_commands.c.command_id)
                                     .where(site_commands.c.sequence == 2))).scalar_one()
    r = await client.post("/v1/commands/2/result", json=result_for({"command_id": two_id}))
    assert r.status_code == 409 and r.json()["error"]["code"] == "command-not-delivered"
    r = await client.post("/v1/commands/2/result", json=result_for(one))
    assert r.status_code == 422 and r.json()["error"]["code"] == "sequence-mismatch"
    async with edge.engine.connect() as conn:
        ack = (await conn.execute(select(site_streams.c.acknowledged_sequence))).scalar_one()
        results = (await conn.execute(select(site_commands.c.result_json)
                                      .where(site_commands.c.result_json.is_not(None)))).all()
    assert ack == 0 and results == []


async def test_concurrent_runtimes_record_each_result_exactly_once_in_order(edge):
    secret = await edge.grant()
    total = 12
    for i in range(total):
        await edge.append("prepare" if i == 0 else "observe",
                          payload=prepare_payload() if i == 0 else {})
    seen: list[int] = []
    outcomes: dict[str, int] = {"recorded": 0, "replayed": 0, "conflict": 0}

    async def runtime(variant: str) -> None:
        client = edge.client(secret)
        while True:
            r = await client.get("/v1/commands/next", params={"wait": 0})
            if r.status_code == 204:
                return
            command = r.json()
            # Two runtimes racing with DIFFERENT results: only one may win.
            body = result_for(command, phase="running" if variant == "a" else "queued")
            r = await client.post(f"/v1/commands/{command['sequence']}/result", json=body)
            if r.status_code == 200:
                if r.json()["recorded"]:
                    outcomes["recorded"] += 1
                    seen.append(command["sequence"])
                else:
                    outcomes["replayed"] += 1
            else:
                assert r.status_code == 409, r.text
                assert r.json()["error"]["code"] in {"result-conflict", "command-not-delivered"}
                outcomes["conflict"] += 1

    await asyncio.gather(*(runtime(v) for v in "abab"))
    assert outcomes["recorded"] == total
    assert seen == list(range(1, total + 1))
    async with edge.engine.connect() as conn:
        rows = (await conn.execute(select(site_commands.c.sequence, site_commands.c.result_json)
                                   .order_by(site_commands.c.sequence))).all()
        ack = (await conn.execute(select(site_streams.c.acknowledged_sequence))).scalar_one()
        events = (await conn.execute(select(outbox_messages.c.type))).scalars().all()
    assert ack == total and all(r.result_json for r in rows)
    assert events.count("metallo.site_coordination.v1.SiteCommandResultRecorded") == total
    assert "metallo.site_coordination.v1.SiteCommandAppended" not in events  # ADR 0014


async def test_edge_restarted_between_pull_and_result(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    command = (await edge.client(secret).get("/v1/commands/next")).json()
    await edge.restart()
    client = edge.client(secret)
    assert (await client.get("/v1/commands/next")).json() == command
    r = await client.post(f"/v1/commands/{command['sequence']}/result", json=result_for(command))
    assert r.json() == {"recorded": True}
    assert (await client.get("/v1/commands/next?wait=0")).status_code == 204


async def _waiting_pull(edge) -> asyncio.Task:
    """A long-poll (20 s) by a fresh grant's client, checked to be waiting."""
    client = edge.client(await edge.grant())
    pull = asyncio.create_task(client.get("/v1/commands/next", params={"wait": 20}))
    await asyncio.sleep(0.3)
    assert not pull.done()
    return pull


async def test_long_poll_wakes_when_a_command_is_appended(edge):
    pull = await _waiting_pull(edge)
    await edge.append("prepare", payload=prepare_payload())
    r = await asyncio.wait_for(pull, 20)
    assert r.status_code == 200 and r.json()["sequence"] == 1


async def test_a_long_poll_answers_no_command_when_the_edge_shuts_down(edge):
    pull = await _waiting_pull(edge)
    edge._server.should_exit = True  # what SIGTERM does
    r = await asyncio.wait_for(pull, 20)
    # Answered, not cut off by the graceful-shutdown timeout (5 s) with a traceback.
    assert r.status_code == 204
    await edge._task
    edge._server = None


async def test_streams_are_separate_per_environment(edge):
    slurm, k8s = await edge.grant(environment="slurm"), await edge.grant(environment="k8s")
    await edge.append("prepare", environment="k8s", attempt_id="att-k", payload=prepare_payload())
    assert (await edge.client(slurm).get("/v1/commands/next")).status_code == 204
    r = await edge.client(k8s).get("/v1/commands/next")
    assert r.json()["environment"] == "k8s" and r.json()["sequence"] == 1


async def test_append_is_idempotent_by_command_id(edge):
    seq = await edge.append("prepare", payload=prepare_payload(), command_id="c-same")
    assert await edge.append("prepare", payload=prepare_payload(), command_id="c-same") == seq
    with pytest.raises(Conflict) as err:
        await edge.append("start", command_id="c-same")
    assert err.value.code == "idempotency-conflict"


async def test_progress_is_reported_once_per_command_and_code(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(secret)
    command = (await client.get("/v1/commands/next")).json()
    body = {"command_id": command["command_id"], "code": "slurm-submission-limited"}
    r1 = await client.post("/v1/commands/1/progress", json=body)
    r2 = await client.post("/v1/commands/1/progress", json=body)
    assert (r1.status_code, r1.json(), r2.status_code, r2.json()) == (
        202, {"reported": True}, 202, {"reported": False})
    r = await client.post("/v1/commands/1/progress",
                          json={"command_id": command["command_id"], "code": "made-up-code"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown-deferral-code"
    async with edge.engine.connect() as conn:
        events = (await conn.execute(select(outbox_messages.c.type))).scalars().all()
    assert events.count("metallo.site_coordination.v1.SiteProgressReported") == 1
    await client.post("/v1/commands/1/result", json=result_for(command))
    r = await client.post("/v1/commands/1/progress",
                          json={"command_id": command["command_id"], "code": "slurm-unavailable"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "command-already-resulted"


async def test_bodies_are_bounded(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(secret)
    command = (await client.get("/v1/commands/next")).json()
    deep = result_for(command)
    nest: dict = {}
    deep["observation"]["extra"] = nest
    for _ in range(40):
        nest["x"] = {}
        nest = nest["x"]
    r = await client.post("/v1/commands/1/result", json=deep)
    assert r.status_code == 422 and r.json()["error"]["code"] == "body-too-deep"
    big = result_for(command)
    big["message"] = "x" * (300 * 1024)
    r = await client.post("/v1/commands/1/progress", json=big)  # general bound: 256 KiB
    assert r.status_code == 413 and r.json()["error"]["code"] == "body-too-large"
    big["message"] = "x" * (7 * 1024 * 1024)  # results (read-log text) are bounded at 6 MiB
    r = await client.post("/v1/commands/1/result", json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body-too-large"
    r = await client.post("/v1/commands/1/result", content=b"{not json",
                          headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed-json"
    r = await client.post("/v1/commands/1/result", json={"command_id": command["command_id"]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid-request"
    async with edge.engine.connect() as conn:
        assert (await conn.execute(select(site_commands.c.result_json))).scalar_one() is None
    assert json.loads(json.dumps(command))["sequence"] == 1


async def test_a_dropped_database_connection_costs_one_503_then_recovers(edge):
    from sqlalchemy import text

    from metallo.persistence.engine import create_engine

    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(secret)
    assert (await client.get("/v1/commands/next")).status_code == 200
    admin = create_engine(edge.database_url.rsplit("/", 1)[0] + "/postgres", pool_size=1)
    async with admin.connect() as conn:
        await conn.execute(text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = :db AND pid <> pg_backend_pid()"),
            {"db": edge.database_url.rsplit("/", 1)[1]})
    await admin.dispose()
    statuses = [(await client.get("/v1/commands/next")).status_code for _ in range(3)]
    assert set(statuses) <= {200, 503} and statuses[-1] == 200
    r = await client.get("/v1/commands/next")
    assert r.json()["sequence"] == 1


async def test_result_with_next_wait_answers_the_next_command_delivered(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    await edge.append("start")
    client = edge.client(secret)
    first = (await client.get("/v1/commands/next")).json()
    r = await client.post("/v1/commands/1/result", params={"next_wait": 0},
                          json=result_for(first))
    assert r.status_code == 200
    body = r.json()
    assert body["recorded"] is True
    assert (body["next"]["sequence"], body["next"]["kind"]) == (2, "start")
    # Handed out = delivered: its result is accepted without a GET in between.
    r = await client.post("/v1/commands/2/result", params={"next_wait": 0},
                          json=result_for(body["next"]))
    assert r.json() == {"recorded": True, "next": None}
    async with edge.engine.connect() as conn:
        rows = (await conn.execute(select(site_commands.c.sequence, site_commands.c.delivery_count)
                                   .order_by(site_commands.c.sequence))).all()
        ack = (await conn.execute(select(site_streams.c.acknowledged_sequence))).scalar_one()
    assert [tuple(r) for r in rows] == [(1, 1), (2, 1)] and ack == 2


async def test_result_without_next_wait_answers_as_before(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    await edge.append("start")
    client = edge.client(secret)
    first = (await client.get("/v1/commands/next")).json()
    r = await client.post("/v1/commands/1/result", json=result_for(first))
    assert r.json() == {"recorded": True}
    async with edge.engine.connect() as conn:
        delivered = (await conn.execute(select(site_commands.c.first_delivered_at)
                                        .where(site_commands.c.sequence == 2))).scalar_one()
    assert delivered is None  # nothing handed out without next_wait


async def test_next_wait_answers_null_after_the_wait_and_records_once(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(secret)
    first = (await client.get("/v1/commands/next")).json()
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await client.post("/v1/commands/1/result", params={"next_wait": 0.5},
                          json=result_for(first))
    assert r.json() == {"recorded": True, "next": None}
    assert loop.time() - started >= 0.4  # it did wait (a lower bound, not a timing claim)
    # The same result again (a Runtime retrying): not recorded twice, still no next.
    r = await client.post("/v1/commands/1/result", params={"next_wait": 0},
                          json=result_for(first))
    assert r.json() == {"recorded": False, "next": None}
    # A different result is still a conflict, and hands nothing out.
    r = await client.post("/v1/commands/1/result", params={"next_wait": 0},
                          json=result_for(first, phase="failed"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "result-conflict"
    r = await client.post("/v1/commands/1/result", params={"next_wait": 31},
                          json=result_for(first))
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid-request"
    async with edge.engine.connect() as conn:
        events = (await conn.execute(select(outbox_messages.c.type))).scalars().all()
        result = (await conn.execute(select(site_commands.c.result_json))).scalar_one()
    assert events.count("metallo.site_coordination.v1.SiteCommandResultRecorded") == 1
    assert json.loads(result) == result_for(first)


async def test_next_wait_long_polls_until_a_command_is_appended(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(secret)
    first = (await client.get("/v1/commands/next")).json()
    post = asyncio.create_task(client.post("/v1/commands/1/result", params={"next_wait": 20},
                                           json=result_for(first)))
    await asyncio.sleep(0.3)
    assert not post.done()
    await edge.append("start")
    r = await asyncio.wait_for(post, 20)
    assert r.json()["recorded"] is True and r.json()["next"]["sequence"] == 2


async def test_concurrent_runtimes_taking_next_from_results_record_each_once(edge):
    secret = await edge.grant()
    total = 12
    for i in range(total):
        await edge.append("prepare" if i == 0 else "observe",
                          payload=prepare_payload() if i == 0 else {})
    seen: list[int] = []
    outcomes: dict[str, int] = {"recorded": 0, "replayed": 0, "conflict": 0}

    async def runtime(variant: str) -> None:
        client = edge.client(secret)
        command = None
        while True:
            if command is None:
                r = await client.get("/v1/commands/next", params={"wait": 0})
                if r.status_code == 204:
                    return
                command = r.json()
            body = result_for(command, phase="running" if variant == "a" else "queued")
            r = await client.post(f"/v1/commands/{command['sequence']}/result",
                                  params={"next_wait": 0}, json=body)
            if r.status_code == 200:
                outcomes["recorded" if r.json()["recorded"] else "replayed"] += 1
                if r.json()["recorded"]:
                    seen.append(command["sequence"])
                command = r.json()["next"]
            else:
                assert r.status_code == 409, r.text
                assert r.json()["error"]["code"] in {"result-conflict", "command-not-delivered"}
                outcomes["conflict"] += 1
                command = None

    await asyncio.gather(*(runtime(v) for v in "abab"))
    assert outcomes["recorded"] == total
    assert seen == list(range(1, total + 1))
    async with edge.engine.connect() as conn:
        rows = (await conn.execute(select(site_commands.c.result_json))).scalars().all()
        ack = (await conn.execute(select(site_streams.c.acknowledged_sequence))).scalar_one()
        events = (await conn.execute(select(outbox_messages.c.type))).scalars().all()
    assert ack == total and all(rows)
    assert events.count("metallo.site_coordination.v1.SiteCommandResultRecorded") == total
