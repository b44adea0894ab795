"""Execution and read authorisation, member tokens and repository grant rules at the
Site edge (seed 001; seed 004 §4B), against the real governance file adapter."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import jwt
import pytest
from sqlalchemy import select

from site_coordination.adaptors.tables import read_permits, repository_grants
from tests.integration.site_coordination_support import prepare_payload, result_for

AUTH = {"run_id": "run-1", "attempt_id": "att-1", "material_digest": "d" * 64,
        "member_id": "m-alice", "site_username": "alice", "account": "demo"}


def _edit_governance(edge, old: str, new: str) -> None:
    text = edge.governance_file.read_text()
    assert old in text
    tmp = edge.governance_file.with_suffix(".new")
    tmp.write_text(text.replace(old, new))
    os.replace(tmp, edge.governance_file)  # a new inode: the file object re-reads it


async def test_execution_authorised_returns_the_saved_material(edge):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    r = await client.post("/v1/authorisations/execution", json=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["authorised"] is True
    assert r.json()["material"]["material_digest"] == "d" * 64
    assert r.json()["binding"] == {"site_username": "alice", "account": "demo"}
    assert r.json()["authority"] == {"project": "demo", "site_id": "lab-slurm",
                                     "member_id": "m-alice"}


async def test_an_authorisation_can_bring_its_stage_in_grant_in_one_round_trip(edge):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    r = await client.post(
        "/v1/authorisations/execution", json={**AUTH, "repository_grant": "stage-in"}
    )
    assert r.status_code == 200, r.text
    grant = r.json()["repository_grant"]
    assert grant["direction"] == "stage-in" and grant["token"]
    assert grant["repository_url"] == "https://127.0.0.1:1/git/demo.git"
    async with edge.engine.connect() as conn:
        rows = (await conn.execute(select(repository_grants.c.grant_id,
                                          repository_grants.c.direction))).all()
    assert [tuple(row) for row in rows] == [(grant["grant_id"], "stage-in")]
    plain = await client.post("/v1/authorisations/execution", json=AUTH)
    assert plain.status_code == 200 and plain.json()["repository_grant"] is None


async def test_a_refused_authorisation_issues_no_grant(edge):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    r = await client.post("/v1/authorisations/execution",
                          json={**AUTH, "material_digest": "e" * 64, "repository_grant": "stage-in"})
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "material-digest-mismatch")
    r = await client.post("/v1/authorisations/execution",
                          json={**AUTH, "repository_grant": "everything"})
    assert r.status_code == 422
    async with edge.engine.connect() as conn:
        assert (await conn.execute(select(repository_grants.c.grant_id))).all() == []


@pytest.mark.parametrize("change,reason", [
    ({"material_digest": "e" * 64}, "material-digest-mismatch"),
    ({"member_id": "m-bob"}, "member-mismatch"),
    ({"account": "other"}, "account-mismatch"),
    ({"site_username": "bob"}, "account-mismatch"),
    ({"run_id": "run-2"}, "run-mismatch"),
])
async def test_execution_refused_when_the_request_differs_from_the_saved_material(
        edge, change, reason):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    r = await client.post("/v1/authorisations/execution", json={**AUTH, **change})
    assert r.status_code == 403
    assert r.json()["error"] == {"code": "authorisation-refused", "reason": reason,
                                 "message": r.json()["error"]["message"]}


async def test_execution_follows_current_governance_and_is_never_cached(edge):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    assert (await client.post("/v1/authorisations/execution", json=AUTH)).status_code == 200
    _edit_governance(edge, "lab-slurm: {site_username: alice, account: demo}",
                     "lab-slurm: {site_username: alice2, account: demo}")
    r = await client.post("/v1/authorisations/execution", json=AUTH)
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "binding-changed")
    _edit_governance(edge, "lab-slurm: {site_username: alice2, account: demo}",
                     "lab-slurm: {site_username: alice, account: demo}")
    assert (await client.post("/v1/authorisations/execution", json=AUTH)).status_code == 200
    _edit_governance(edge, "sites: [lab-slurm, lab-k8s]", "sites: [lab-k8s]")
    r = await client.post("/v1/authorisations/execution", json=AUTH)
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "site-not-in-project")
    # A broken file is "cannot answer now", not a denial and not the old answer.
    edge.governance_file.write_text("version: [")
    r = await client.post("/v1/authorisations/execution", json=AUTH)
    assert (r.status_code, r.json()["error"]["code"]) == (503, "authority-unavailable")


async def test_ended_attempts_and_unknown_attempts_are_refused(edge):
    secret = await edge.grant()
    client = edge.client(secret)
    r = await client.post("/v1/authorisations/execution", json=AUTH)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "attempt-not-found")
    await edge.append("prepare", payload=prepare_payload())
    command = (await client.get("/v1/commands/next")).json()
    await client.post("/v1/commands/1/result", json=result_for(command, outcome="refused"))
    r = await client.post("/v1/authorisations/execution", json=AUTH)
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "attempt-completed")
    r = await client.post("/v1/attempts/att-1/repository-grants", json={"direction": "stage-out"})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "attempt-completed")
    r = await client.post("/v1/attempts/att-1/member-token")
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "attempt-completed")


async def test_read_permit_for_exact_read(edge):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    body = {"run_id": "run-1", "attempt_id": "att-1", "viewer": "m-bob", "read_kind": "logs",
            "path": "logs/compute.log", "max_bytes": 4096}
    r = await client.post("/v1/authorisations/read", json=body)
    assert r.status_code == 200, r.text
    permit = r.json()
    assert {k: permit[k] for k in body} == body and permit["permit_id"].startswith("rp-")
    for change, status, code in [({"viewer": "m-nobody"}, 403, "authorisation-refused"),
                                 ({"path": "../etc/passwd"}, 422, "invalid-read-path"),
                                 ({"max_bytes": 10**9}, 422, "invalid-request"),
                                 ({"read_kind": "secrets"}, 422, "invalid-request")]:
        r = await client.post("/v1/authorisations/read", json={**body, **change})
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), change
    async with edge.engine.connect() as conn:
        assert len((await conn.execute(select(read_permits))).all()) == 1


async def test_member_token_is_a_verifiable_rs256_jwt(edge):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    r = await client.post("/v1/attempts/att-1/member-token")
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    jwks = (await edge.client().get("/.well-known/jwks.json")).json()
    header = jwt.get_unverified_header(token)
    (jwk,) = [k for k in jwks["keys"] if k["kid"] == header["kid"]]
    claims = jwt.decode(token, jwt.PyJWK(jwk).key, algorithms=["RS256"],
                        issuer="https://issuer.test", options={"verify_aud": False})
    assert header["alg"] == "RS256"
    assert claims["sub"] == "m-alice" and claims["typ"] == "Bearer"
    assert claims["azp"] == "metallo-site-runtime"
    assert "site_username" in claims["scope"].split()
    assert claims["site_username"] == claims["username"] == claims["sun"] == "alice"
    assert 0 < claims["exp"] - claims["iat"] <= 3600


async def test_repository_grant_deadline_rules(edge):
    past = datetime.now(UTC) - timedelta(minutes=5)
    url = edge.url + "/git/demo.git"
    await edge.append("prepare", payload=prepare_payload(url, deadline=past))
    client = edge.client(await edge.grant())
    r = await client.post("/v1/attempts/att-1/repository-grants", json={"direction": "stage-in"})
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "attempt-deadline-passed")
    r = await client.post("/v1/attempts/att-1/repository-grants", json={"direction": "stage-out"})
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "attempt-not-submitted")
    # Once the Attempt's start was delivered, stage-out may cross the deadline.
    command = (await client.get("/v1/commands/next")).json()
    await client.post("/v1/commands/1/result", json=result_for(command))
    await edge.append("start")
    await client.get("/v1/commands/next")
    r = await client.post("/v1/attempts/att-1/repository-grants", json={"direction": "stage-out"})
    assert r.status_code == 201, r.text
    assert r.json()["repository_url"] == url and r.json()["token"].startswith("prt_")
    r = await client.post("/v1/attempts/att-1/repository-grants", json={"direction": "sideways"})
    assert r.status_code == 422


async def test_member_token_passes_the_runtime_verifier_with_the_edge_jwks(edge):
    from metallo.identity.verify import HttpJwksSource, JwksCache, MemberTokenVerifier

    await edge.append("prepare", payload=prepare_payload())
    r = await edge.client(await edge.grant()).post("/v1/attempts/att-1/member-token")
    verifier = MemberTokenVerifier(
        issuer="https://issuer.test", authorized_party="metallo-site-runtime",
        keys=JwksCache(HttpJwksSource(edge.url + "/.well-known/jwks.json",
                                      verify=edge.ssl_context())))
    verified = await verifier.verify(r.json()["token"], site_username="alice")
    assert (verified.subject, verified.site_username) == ("m-alice", "alice")


async def test_read_permits_are_rechecked_on_use(edge):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    body = {"run_id": "run-1", "attempt_id": "att-1", "viewer": "m-bob", "read_kind": "output",
            "path": "out/model.bin", "max_bytes": 1024}
    permit = (await client.post("/v1/authorisations/read", json=body)).json()
    r = await client.post(f"/v1/read-permits/{permit['permit_id']}/check")
    assert r.status_code == 200 and r.json() == permit
    other = edge.client(await edge.grant(environment="k8s"))
    r = await other.post(f"/v1/read-permits/{permit['permit_id']}/check")
    assert (r.status_code, r.json()["error"]["code"]) == (403, "grant-wrong-environment")
    _edit_governance(edge, "m-bob: [runs.read, pipelines.read]", "m-bob: [pipelines.read]")
    r = await client.post(f"/v1/read-permits/{permit['permit_id']}/check")
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "viewer-not-authorised")
    async with edge.engine.begin() as conn:
        await conn.execute(read_permits.update().values(
            expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    r = await client.post(f"/v1/read-permits/{permit['permit_id']}/check")
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "permit-expired")
    r = await client.post("/v1/read-permits/rp-unknown/check")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "read-permit-not-found")
