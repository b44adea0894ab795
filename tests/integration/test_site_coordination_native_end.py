"""The native end notice (ADR 0016): ``POST /v1/attempts/{attempt_id}/native-end`` over
the real TLS edge and PostgreSQL. The first notice of an Attempt of the caller's stream
publishes one ``SiteNativeEndNoticed`` through the outbox; repeats, unknown Attempts,
another stream's Attempts, malformed ids and unusable grants publish nothing and
change nothing."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from metallo.messaging.schema import outbox_messages
from metallo.site_coordination.v1 import site_coordination_pb2 as sc_pb2
from site_coordination.adaptors.tables import native_end_notices, site_commands, site_streams
from site_coordination.application.grants import list_command_grants, revoke_command_grant
from tests.integration.site_coordination_support import prepare_payload

NOTICED = "metallo.site_coordination.v1.SiteNativeEndNoticed"


async def _notices(edge) -> list[tuple]:
    async with edge.engine.connect() as conn:
        return [tuple(r) for r in (await conn.execute(select(
            native_end_notices.c.attempt_id, native_end_notices.c.site_id,
            native_end_notices.c.environment, native_end_notices.c.run_id))).all()]


async def _events(edge) -> list[tuple[str, sc_pb2.SiteNativeEndNoticed]]:
    async with edge.engine.connect() as conn:
        rows = (await conn.execute(select(outbox_messages.c.aggregate_id, outbox_messages.c.body)
                                   .where(outbox_messages.c.type == NOTICED)
                                   .order_by(outbox_messages.c.id))).all()
    return [(r.aggregate_id, sc_pb2.SiteNativeEndNoticed.FromString(r.body)) for r in rows]


async def _state(edge) -> tuple:
    """Everything a notice must not change, beside its own row and event."""
    async with edge.engine.connect() as conn:
        commands = (await conn.execute(select(site_commands).order_by(
            site_commands.c.command_id))).all()
        streams = (await conn.execute(select(site_streams).order_by(
            site_streams.c.site_id, site_streams.c.environment))).all()
        outbox = (await conn.execute(select(outbox_messages.c.id))).scalars().all()
    return [tuple(r) for r in commands], [tuple(r) for r in streams], outbox


async def test_the_first_notice_publishes_once_and_repeats_answer_false(edge):
    secret = await edge.grant()
    await edge.append("prepare", run_id="run-7", attempt_id="att-7", payload=prepare_payload())
    await edge.append("start", run_id="run-7", attempt_id="att-7")
    client = edge.client(secret)
    assert (await client.get("/v1/commands/next")).status_code == 200
    commands_before, streams_before, _ = await _state(edge)

    r = await client.post("/v1/attempts/att-7/native-end")  # no body at all
    assert (r.status_code, r.json()) == (202, {"noticed": True})
    events = await _events(edge)
    assert len(events) == 1
    aggregate, event = events[0]
    assert aggregate == "site-stream:lab-slurm:slurm"  # the stream's other events' aggregate
    assert (event.site_id, event.environment, event.run_id, event.attempt_id) == (
        "lab-slurm", "slurm", "run-7", "att-7")
    assert await _notices(edge) == [("att-7", "lab-slurm", "slurm", "run-7")]

    for kwargs in ({}, {"json": {}}, {"content": b"", "headers": {"content-type": "application/json"}}):
        r = await client.post("/v1/attempts/att-7/native-end", **kwargs)
        assert (r.status_code, r.json()) == (202, {"noticed": False}), kwargs
    assert len(await _events(edge)) == 1
    # A hint, never evidence: no command, delivery, result or acknowledgement moved.
    commands_after, streams_after, _ = await _state(edge)
    assert (commands_after, streams_after) == (commands_before, streams_before)


async def test_concurrent_first_notices_publish_exactly_one_event(edge):
    secret = await edge.grant()
    await edge.append("prepare", attempt_id="att-1", payload=prepare_payload())
    client = edge.client(secret)
    answers = await asyncio.gather(*[client.post("/v1/attempts/att-1/native-end", json={})
                                     for _ in range(8)])
    assert {r.status_code for r in answers} == {202}
    assert sorted(r.json()["noticed"] for r in answers) == [False] * 7 + [True]
    assert len(await _events(edge)) == 1


async def test_an_unknown_attempt_is_not_in_the_stream(edge):
    secret = await edge.grant()
    await edge.append("prepare", attempt_id="att-1", payload=prepare_payload())
    before = await _state(edge)
    r = await edge.client(secret).post("/v1/attempts/att-unknown/native-end")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "attempt-not-in-stream"
    assert await _state(edge) == before and await _notices(edge) == []


@pytest.mark.parametrize("site, environment", [("lab-k8s", "k8s"), ("lab-slurm", "k8s"),
                                               ("other-slurm", "slurm")])
async def test_an_attempt_of_another_stream_is_not_in_the_callers_stream(edge, site, environment):
    slurm = await edge.grant("lab-slurm", "slurm")
    owner = await edge.grant(site, environment)
    await edge.append("prepare", attempt_id="att-1", payload=prepare_payload())
    await edge.append("prepare", site=site, environment=environment, run_id="run-2",
                      attempt_id="att-2", payload=prepare_payload())
    before = await _state(edge)
    r = await edge.client(slurm).post("/v1/attempts/att-2/native-end")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "attempt-not-in-stream")
    assert await _state(edge) == before and await _notices(edge) == []
    # Its own stream's grant is noticed.
    r = await edge.client(owner).post("/v1/attempts/att-2/native-end")
    assert (r.status_code, r.json()) == (202, {"noticed": True})
    [(aggregate, event)] = await _events(edge)
    assert aggregate == f"site-stream:{site}:{environment}"
    assert (event.site_id, event.environment, event.run_id, event.attempt_id) == (
        site, environment, "run-2", "att-2")


@pytest.mark.parametrize("attempt_id, code", [
    ("a" * 129, "invalid-request"),       # longer than 128
    ("att!1", "invalid-argument"),        # unusual characters
    ("-att-1", "invalid-argument"),       # must start with a letter or digit
    ("att%201", "invalid-argument"),      # a space
    ("att%0A1", "invalid-argument"),      # a newline
])
async def test_a_malformed_attempt_id_is_refused_and_changes_nothing(edge, attempt_id, code):
    secret = await edge.grant()
    await edge.append("prepare", attempt_id="att-1", payload=prepare_payload())
    before = await _state(edge)
    r = await edge.client(secret).post(f"/v1/attempts/{attempt_id}/native-end")
    assert (r.status_code, r.json()["error"]["code"]) == (422, code), r.text
    assert await _state(edge) == before and await _notices(edge) == []


async def test_a_body_with_fields_or_not_json_is_refused(edge):
    secret = await edge.grant()
    await edge.append("prepare", attempt_id="att-1", payload=prepare_payload())
    client = edge.client(secret)
    r = await client.post("/v1/attempts/att-1/native-end", json={"phase": "succeeded"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid-request")
    r = await client.post("/v1/attempts/att-1/native-end", content=b"{not json",
                          headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "malformed-json")
    assert await _notices(edge) == [] and await _events(edge) == []


@pytest.mark.parametrize("header, code", [
    (None, "credential-missing"),
    ("Bearer psb_short", "credential-malformed"),
    ("Bearer psb_" + "A" * 43, "credential-unknown"),
])
async def test_no_or_bad_grant_gets_401_and_changes_nothing(edge, header, code):
    await edge.append("prepare", attempt_id="att-1", payload=prepare_payload())
    before = await _state(edge)
    client = edge.client()
    if header is not None:
        client.headers["Authorization"] = header
    r = await client.post("/v1/attempts/att-1/native-end")
    assert (r.status_code, r.json()["error"]["code"]) == (401, code)
    assert await _state(edge) == before and await _notices(edge) == []


async def test_an_expired_or_revoked_grant_gets_401(edge):
    await edge.append("prepare", attempt_id="att-1", payload=prepare_payload())
    revoked = await edge.grant()
    [listed] = await list_command_grants(edge.transaction())
    await revoke_command_grant(edge.transaction(), listed.grant_id)
    r = await edge.client(revoked).post("/v1/attempts/att-1/native-end")
    assert (r.status_code, r.json()["error"]["code"]) == (401, "credential-revoked")
    expired = await edge.grant()
    await edge.expire_grants()
    r = await edge.client(expired).post("/v1/attempts/att-1/native-end")
    assert (r.status_code, r.json()["error"]["code"]) == (401, "credential-expired")
    assert await _notices(edge) == [] and await _events(edge) == []
