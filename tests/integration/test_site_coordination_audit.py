"""Site Coordination audits the operator grant commands and the read permits its edge
issues or refuses, each in the deciding transaction (docs/operators.md, Audit), and
answers ListAuditRecords for its own records."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select

from metallo.common.v1 import common_pb2
from metallo.messaging import OutboxRelay, Rejected, RequestClient
from metallo.operator_requests import create_grant_command, new_grant_secret, revoke_grant_command
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from site_coordination.adaptors.command_handlers import build_command_server
from site_coordination.adaptors.governance_authority import GovernanceAuthority
from site_coordination.adaptors.tables import read_permits
from tests.integration.audit_support import (
    all_audit_text,
    allow_commits,
    audit_rows,
    receipt_time,
    refuse_commits,
)
from tests.integration.site_coordination_support import prepare_payload

pytestmark = pytest.mark.integration

READ = {"run_id": "run-1", "attempt_id": "att-1", "viewer": "m-bob", "read_kind": "logs",
        "path": "logs/compute.log", "max_bytes": 4096}


@pytest.fixture
async def bus(edge, bus_url, topology):
    """Site Coordination's command server and relay, and a client asserting members (as
    the Go API, a principal allowed to)."""
    server = build_command_server(edge.engine, bus_url("site_coordination"), topology,
                                  GovernanceAuthority(edge.governance_file))
    relay = OutboxRelay(edge.engine, bus_url("site_coordination"), topology,
                        owner="site_coordination", poll_seconds=0.05)
    client = RequestClient(bus_url("go_api"), topology)
    for part in (server, relay, client):
        await part.start()
    try:
        yield client
    finally:
        await client.close()
        await relay.stop()
        await server.stop()


def audit_query(member: str, project: str = "") -> sc.ListAuditRecords:
    return sc.ListAuditRecords(metadata=common_pb2.QueryMetadata(acting_member=member,
                                                                 project=project))


async def test_grant_commands_are_recorded_without_the_secret(edge, bus):
    secret = new_grant_secret()
    create = create_grant_command("m-operator", "lab-slurm", "slurm", "2h", "lab", secret)
    created = await bus.request(create, timeout=15)
    refused = create_grant_command("m-alice", "lab-slurm", "slurm", "2h", "lab", secret)
    with pytest.raises(Rejected):
        await bus.request(refused, timeout=15)
    revoke = revoke_grant_command("m-operator", created.grant.grant_id)
    await bus.request(revoke, timeout=15)

    made, denied, ended = await audit_rows(edge.engine)
    assert (made["action"], made["decision"], made["project"], made["actor"]) == (
        "grant.create", "accepted", "", "m-operator")
    assert made["affected"] == {"site_id": "lab-slurm", "grant_id": created.grant.grant_id}
    assert made["summary"]["secret_sha256"] == "[redacted]"
    assert made["recorded_at"] == await receipt_time(edge.engine, create.metadata.command_id)
    assert (denied["action"], denied["actor"], denied["decision"], denied["code"]) == (
        "grant.create", "m-alice", "refused", "permission-denied")
    assert (ended["action"], ended["affected"]) == ("grant.revoke",
                                                    {"grant_id": created.grant.grant_id})
    stored = await all_audit_text(edge.engine)
    assert secret not in stored and create.secret_sha256 not in stored

    platform = await bus.request(audit_query("m-operator"), timeout=15)
    assert [r.action for r in platform.records] == ["grant.create", "grant.create",
                                                    "grant.revoke"]
    assert {r.service for r in platform.records} == {"site_coordination"}
    with pytest.raises(Rejected) as no:
        await bus.request(audit_query("m-alice"), timeout=15)  # no platform.read
    assert no.value.code == "permission-denied"


async def test_read_permits_issued_and_refused_are_recorded(edge, bus):
    await edge.append("prepare", payload=prepare_payload())
    client = edge.client(await edge.grant())
    permit = (await client.post("/v1/authorisations/read", json=READ)).json()
    for change in ({"viewer": "m-nobody"}, {"path": "../etc/passwd"}):
        assert (await client.post("/v1/authorisations/read", json={**READ, **change})
                ).status_code in (403, 422)

    issued, stranger, escape = await audit_rows(edge.engine)
    assert (issued["action"], issued["decision"], issued["actor"], issued["project"]) == (
        "read-permit.issue", "accepted", "m-bob", "demo")
    assert issued["affected"] == {"site_id": "lab-slurm", "attempt_id": "att-1",
                                  "permit_id": permit["permit_id"], "run_id": "run-1"}
    assert issued["principal"].startswith("cg-") and issued["request_id"] == permit["permit_id"]
    # The deciding transaction: its now() made the permit's expiry (now + 300 s).
    async with edge.engine.connect() as conn:
        expires_at = (await conn.execute(select(read_permits.c.expires_at))).scalar_one()
    assert issued["recorded_at"] == expires_at - timedelta(seconds=300)
    assert (stranger["actor"], stranger["decision"], stranger["code"]) == (
        "m-nobody", "refused", "authorisation-refused")
    assert (escape["code"], escape["project"]) == ("invalid-read-path", "demo")

    alice = await bus.request(audit_query("m-alice", "demo"), timeout=15)
    assert [r.decision for r in alice.records] == ["accepted", "refused", "refused"]
    with pytest.raises(Rejected):
        await bus.request(audit_query("m-bob", "demo"), timeout=15)


async def test_a_permit_whose_transaction_rolls_back_leaves_no_record(edge):
    await edge.append("prepare", payload=prepare_payload())
    secret = await edge.grant()
    client = edge.client(secret)
    await refuse_commits(edge.engine, "read_permits")
    try:
        failed = await client.post("/v1/authorisations/read", json=READ)
    except httpx.RemoteProtocolError:
        pass  # the server dropped the request whose commit failed
    else:
        assert failed.status_code >= 500
    assert await audit_rows(edge.engine) == []
    async with edge.engine.connect() as conn:
        assert (await conn.execute(select(read_permits))).all() == []
    await allow_commits(edge.engine, "read_permits")
    fresh = edge.client(secret)  # the failed request's connection was dropped
    assert (await fresh.post("/v1/authorisations/read", json=READ)).status_code == 200
    assert [r["decision"] for r in await audit_rows(edge.engine)] == ["accepted"]
