"""Site Coordination audits every repository-grant decision at the Site edge in the
deciding transaction (docs/operators.md, Audit): an issued grant, a refused issue, a
revocation asked by the Runtime and one made at the Attempt's end — never the token
nor its hash. Real PostgreSQL, the real Site edge and lab Git server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from site_coordination.adaptors.tables import repository_grants
from site_coordination.domain.grants import secret_hash
from tests.integration.audit_support import all_audit_text, audit_rows
from tests.integration.site_coordination_support import prepare_payload, result_for
from tests.integration.test_site_coordination_git import Git, _seed_repository

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(edge, tmp_path):
    """An edge client of a Runtime whose stream holds ``prepare`` of run-1/att-1."""
    git = Git(edge, tmp_path)
    await _seed_repository(edge, git, "demo.git")
    await edge.append("prepare", run_id="run-1", attempt_id="att-1",
                      payload=prepare_payload(git.url("demo.git")))
    return edge.client(await edge.grant())


async def _grant_row(edge, grant_id: str):
    async with edge.engine.connect() as conn:
        return (await conn.execute(select(repository_grants).where(
            repository_grants.c.grant_id == grant_id))).one()


async def test_an_issued_grant_and_its_revocation_are_recorded_once(edge, runtime):
    r = await runtime.post("/v1/attempts/att-1/repository-grants",
                           json={"direction": "stage-out"})
    assert r.status_code == 201, r.text
    issued = r.json()
    [record] = await audit_rows(edge.engine)
    assert (record["action"], record["decision"], record["actor"], record["project"]) == (
        "repository-grant.issue", "accepted", "lab-slurm", "demo")
    assert record["principal"].startswith("cg-") and record["request_id"] == issued["grant_id"]
    assert record["affected"] == {"site_id": "lab-slurm", "run_id": "run-1",
                                  "attempt_id": "att-1",
                                  "repository_grant_id": issued["grant_id"]}
    assert record["summary"] == {"direction": "stage-out"}
    row = await _grant_row(edge, issued["grant_id"])
    # The deciding transaction: its now() stamped the grant row.
    assert record["recorded_at"] == row.created_at == row.expires_at - timedelta(seconds=7200)

    assert (await runtime.delete(f"/v1/repository-grants/{issued['grant_id']}")
            ).status_code == 204
    assert (await runtime.delete(f"/v1/repository-grants/{issued['grant_id']}")
            ).status_code == 204  # a repeat decides nothing
    _, revoked = await audit_rows(edge.engine)
    assert (revoked["action"], revoked["decision"], revoked["principal"]) == (
        "repository-grant.revoke", "accepted", record["principal"])
    assert revoked["affected"] == record["affected"]
    assert revoked["summary"] == {"direction": "stage-out", "reason": "runtime"}
    assert revoked["recorded_at"] == (await _grant_row(edge, issued["grant_id"])).revoked_at

    stored = await all_audit_text(edge.engine)
    assert issued["token"] not in stored and secret_hash(issued["token"]) not in stored


async def test_the_attempts_end_revokes_with_a_record_and_a_later_issue_is_refused(
        edge, runtime):
    command = (await runtime.get("/v1/commands/next")).json()
    issued = (await runtime.post("/v1/attempts/att-1/repository-grants",
                                 json={"direction": "stage-in"})).json()
    r = await runtime.post(f"/v1/commands/{command['sequence']}/result",
                           json=result_for(command, phase="failed"))
    assert r.status_code == 200, r.text
    _, ended = await audit_rows(edge.engine)
    assert (ended["action"], ended["decision"], ended["project"]) == (
        "repository-grant.revoke", "accepted", "demo")
    assert ended["affected"]["repository_grant_id"] == issued["grant_id"]
    assert ended["summary"] == {"direction": "stage-in", "reason": "attempt-ended"}
    assert ended["recorded_at"] == (await _grant_row(edge, issued["grant_id"])).revoked_at

    r = await runtime.post("/v1/attempts/att-1/repository-grants",
                           json={"direction": "stage-out"})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "attempt-completed")
    refused = (await audit_rows(edge.engine, decision="refused"))
    assert [(x["action"], x["code"], x["project"]) for x in refused] == [
        ("repository-grant.issue", "attempt-completed", "demo")]
    assert refused[0]["affected"] == {"site_id": "lab-slurm", "run_id": "run-1",
                                      "attempt_id": "att-1"}
    async with edge.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(repository_grants))
                ).scalar_one() == 1  # the refusal issued nothing
    assert issued["token"] not in await all_audit_text(edge.engine)


async def test_an_issue_for_an_attempt_not_in_the_stream_is_recorded_refused(edge, runtime):
    r = await runtime.post("/v1/attempts/att-9/repository-grants",
                           json={"direction": "stage-in"})
    assert r.status_code == 404
    [refused] = await audit_rows(edge.engine)
    assert (refused["action"], refused["decision"], refused["code"], refused["project"]) == (
        "repository-grant.issue", "refused", "attempt-not-found", "")


async def test_a_batch_revocation_records_each_decision(edge, runtime):
    issued = (await runtime.post("/v1/attempts/att-1/repository-grants",
                                 json={"direction": "stage-in"})).json()
    r = await runtime.post("/v1/repository-grants/revocations",
                           json={"grant_ids": [issued["grant_id"], "rg-absent"]})
    assert r.json()["results"] == {issued["grant_id"]: "revoked", "rg-absent": "not-found"}
    rows = await audit_rows(edge.engine, action="repository-grant.revoke")
    assert [(x["decision"], x["code"], x["request_id"]) for x in rows] == [
        ("accepted", "", issued["grant_id"]),
        ("refused", "repository-grant-not-found", "rg-absent")]
    assert rows[0]["recorded_at"] == rows[1]["recorded_at"]  # one transaction


AUTH = {"run_id": "run-1", "attempt_id": "att-1", "material_digest": "d" * 64,
        "member_id": "m-alice", "site_username": "alice", "account": "demo"}


async def test_an_execution_authorisations_grant_is_recorded_its_refusal_is_not(edge):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    refused = await client.post("/v1/authorisations/execution",
                                json={**AUTH, "material_digest": "e" * 64,
                                      "repository_grant": "stage-in"})
    assert refused.status_code == 403
    assert await audit_rows(edge.engine) == []  # no grant was decided
    r = await client.post("/v1/authorisations/execution",
                          json={**AUTH, "repository_grant": "stage-in"})
    assert r.status_code == 200, r.text
    [issued] = await audit_rows(edge.engine)
    assert (issued["action"], issued["decision"], issued["request_id"]) == (
        "repository-grant.issue", "accepted", r.json()["repository_grant"]["grant_id"])
