"""Every command-grant negative (seed 004 §4B): missing, malformed, unknown, expired,
revoked, wrong scope and wrong environment get 401/403 and change nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from site_coordination.adaptors.tables import command_grants, repository_grants, site_commands
from site_coordination.application.grants import list_command_grants, revoke_command_grant
from tests.integration.site_coordination_support import prepare_payload, result_for


async def _state(edge):
    async with edge.engine.connect() as conn:
        commands = (await conn.execute(select(site_commands.c.command_id,
                                              site_commands.c.delivery_count,
                                              site_commands.c.result_json))).all()
        grants = (await conn.execute(select(repository_grants.c.grant_id))).all()
    return sorted(map(tuple, commands)), grants


async def _every_route(client, command_id: str):
    body = result_for({"command_id": command_id})
    return [
        await client.get("/v1/commands/next"),
        await client.post("/v1/commands/1/result", json=body),
        await client.post("/v1/commands/1/progress",
                          json={"command_id": command_id, "code": "slurm-unavailable"}),
        await client.post("/v1/authorisations/execution", json={
            "run_id": "run-1", "attempt_id": "att-1", "material_digest": "d" * 64,
            "member_id": "m-alice", "site_username": "alice", "account": "demo"}),
        await client.post("/v1/authorisations/read", json={
            "run_id": "run-1", "attempt_id": "att-1", "viewer": "m-alice", "read_kind": "logs",
            "path": "compute.log", "max_bytes": 1024}),
        await client.post("/v1/attempts/att-1/repository-grants", json={"direction": "stage-in"}),
        await client.post("/v1/attempts/att-1/member-token"),
    ]


@pytest.mark.parametrize("header", [None, "Bearer", "Basic abc", "Bearer psb_short",
                                    "Bearer xyz_" + "a" * 43, "psb_" + "a" * 43])
async def test_missing_or_malformed_credentials_get_401(edge, header):
    await edge.append("prepare", payload=prepare_payload(), command_id="c1")
    before = await _state(edge)
    client = edge.client()
    if header is not None:
        client.headers["Authorization"] = header
    for r in await _every_route(client, "c1"):
        assert r.status_code == 401, r.text
        code = r.json()["error"]["code"]
        assert code == ("credential-missing" if header is None else "credential-malformed")
    assert await _state(edge) == before


async def test_unknown_expired_and_revoked_grants_get_401(edge):
    await edge.append("prepare", payload=prepare_payload(), command_id="c1")
    before = await _state(edge)
    unknown = "psb_" + "A" * 43
    for r in await _every_route(edge.client(unknown), "c1"):
        assert (r.status_code, r.json()["error"]["code"]) == (401, "credential-unknown")

    revoked = await edge.grant()
    grants = await list_command_grants(edge.transaction())
    assert await revoke_command_grant(edge.transaction(), grants[0].grant_id)
    assert not await revoke_command_grant(edge.transaction(), grants[0].grant_id)
    for r in await _every_route(edge.client(revoked), "c1"):
        assert (r.status_code, r.json()["error"]["code"]) == (401, "credential-revoked")

    expired = await edge.grant()
    await edge.expire_grants()
    for r in await _every_route(edge.client(expired), "c1"):
        assert (r.status_code, r.json()["error"]["code"]) == (401, "credential-expired")
    assert await _state(edge) == before
    async with edge.engine.connect() as conn:
        hashes = (await conn.execute(select(command_grants.c.secret_sha256))).scalars().all()
    assert revoked not in hashes and expired not in hashes  # only hashes are stored


async def test_grant_revoked_while_in_use_is_refused_on_the_next_request(edge):
    secret = await edge.grant()
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(secret)
    assert (await client.get("/v1/commands/next")).status_code == 200
    grants = await list_command_grants(edge.transaction())
    await revoke_command_grant(edge.transaction(), grants[0].grant_id)
    assert (await client.get("/v1/commands/next")).status_code == 401


async def test_wrong_environment_and_wrong_scope_get_403(edge):
    await edge.append("prepare", payload=prepare_payload(), command_id="c1")
    await edge.client(await edge.grant()).get("/v1/commands/next")  # deliver it
    before = await _state(edge)
    for secret, code in [(await edge.grant(environment="k8s"), "grant-wrong-environment"),
                         (await edge.grant(site="other-site"), "grant-wrong-scope")]:
        client = edge.client(secret)
        # Its own stream is empty: nothing of lab-slurm/slurm is handed out.
        assert (await client.get("/v1/commands/next")).status_code == 204
        responses = (await _every_route(client, "c1"))[1:]
        for r in responses:
            assert r.status_code == 403, r.text
            assert r.json()["error"]["code"] == code
    assert await _state(edge) == before


async def test_refusals_are_logged_by_code_without_secrets(edge, caplog):
    caplog.set_level("INFO", logger="site_coordination")
    secret = await edge.grant()
    grants = await list_command_grants(edge.transaction())
    await revoke_command_grant(edge.transaction(), grants[0].grant_id)
    await edge.client(secret).get("/v1/commands/next")
    await edge.client("psb_" + "B" * 43).get("/v1/commands/next")
    text = caplog.text
    assert "credential-revoked" in text and "credential-unknown" in text
    assert secret not in text and secret[4:] not in text and "B" * 43 not in text
