"""``metallo site grant …`` against Site Coordination itself: operator commands
over RabbitMQ (``CreateCommandGrant``, ``RevokeCommandGrant``,
``ListCommandGrants``) checked against the governance file's operators, on real
PostgreSQL; the secret the CLI printed opens the Site edge, and only its hash is
stored."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from sqlalchemy import select

from metallo.messaging import OutboxRelay, Rejected, RequestClient
from metallo.operator_requests import create_grant_command, new_grant_secret
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from site_coordination.adaptors.command_handlers import build_command_server
from site_coordination.adaptors.governance_authority import GovernanceAuthority
from site_coordination.adaptors.tables import command_grants
from tests.integration.site_coordination_support import prepare_payload
from tests.unit.cli_support import cli, cli_environment, log_in  # noqa: F401 - autouse fixture

pytestmark = pytest.mark.integration


def log_in_as(edge, subject: str) -> None:
    """The CLI logged in with a real access token of ``subject`` from the edge's issuer."""
    token, _ = edge.issuer.issue_access(subject, "metallo-cli")
    log_in(Path(os.environ["METALLO_CREDENTIALS_FILE"]), token=token)


@pytest.fixture
async def serving(edge, bus_url, topology, monkeypatch):
    """Site Coordination's command server (with the operator requests) and relay; it
    verifies member tokens of the edge's issuer, and the CLI is logged in as the
    operator."""
    monkeypatch.setenv("METALLO_MEMBER", "m-operator")
    monkeypatch.setenv("METALLO_OIDC_ISSUER", "https://issuer.test")
    monkeypatch.setenv("METALLO_OIDC_JWKS_URL", f"file:{edge.tmp / 'issuer' / 'jwks.json'}")
    monkeypatch.setenv("METALLO_GOVERNANCE_FILE", str(edge.governance_file))
    log_in_as(edge, "lab-operator")
    server = build_command_server(edge.engine, bus_url("site_coordination"), topology,
                                  GovernanceAuthority(edge.governance_file))
    relay = OutboxRelay(edge.engine, bus_url("site_coordination"), topology, owner="site_coordination",
                        poll_seconds=0.05)
    await server.start()
    await relay.start()
    try:
        yield edge
    finally:
        await relay.stop()
        await server.stop()


async def test_create_list_revoke_over_the_bus(serving):
    created = await cli("site", "grant", "create", "--site", "lab-slurm", "--environment",
                        "slurm", "--expires", "2h", "--label", "test runtime")
    assert created.code == 0, created.stderr
    secret = created.stdout.strip()
    async with serving.engine.connect() as conn:
        stored = (await conn.execute(select(command_grants))).one()
    assert stored.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert (stored.site_id, stored.environment, stored.label) == ("lab-slurm", "slurm",
                                                                 "test runtime")
    await serving.append("prepare", payload=prepare_payload())
    runtime = serving.client(secret)
    assert (await runtime.get("/v1/commands/next")).status_code == 200

    listed = json.loads((await cli("site", "grant", "list", "-o", "json")).stdout)["grants"]
    assert [g["grant_id"] for g in listed] == [stored.grant_id] and listed[0]["revoked_at"] is None
    revoked = await cli("site", "grant", "revoke", stored.grant_id)
    assert revoked.code == 0 and f"revoked {stored.grant_id}" in revoked.stdout
    assert (await runtime.get("/v1/commands/next")).status_code == 401
    again = await cli("site", "grant", "revoke", stored.grant_id)
    assert again.code == 3
    listed = json.loads((await cli("site", "grant", "list", "-o", "json")).stdout)["grants"]
    assert listed[0]["revoked_at"]


async def test_refusals_change_nothing(serving, monkeypatch):
    cases = [
        (["--site", "lab-slurm", "--environment", "mars"], 2, "environment-mismatch"),
        (["--site", "lab-slurm", "--environment", "slurm", "--expires", "forever"], 2,
         "invalid-duration"),
        (["--site", "nosuch", "--environment", "slurm"], 3, "site-not-found"),
        (["--site", "lab-slurm", "--environment", "k8s"], 2, "environment-mismatch"),
    ]
    for args, code, text in cases:
        refused = await cli("site", "grant", "create", *args)
        assert (refused.code, refused.stdout) == (code, ""), (args, refused.stderr)
        assert text in refused.stderr, (args, refused.stderr)
    monkeypatch.setenv("METALLO_MEMBER", "m-alice")  # a member, not an operator
    log_in_as(serving, "lab-alice")
    denied = await cli("site", "grant", "list")
    assert denied.code == 2 and "sites.grants" in denied.stderr
    async with serving.engine.connect() as conn:
        assert (await conn.execute(select(command_grants))).all() == []


async def test_a_replayed_create_returns_the_same_grant(serving, bus_url, topology):
    client = RequestClient(bus_url("go_api"), topology)
    await client.start()
    try:
        command = create_grant_command("m-operator", "lab-slurm", "slurm", "1d", "", new_grant_secret())
        first = await client.request(command, timeout=15)
        replay = await client.request(command, timeout=15)
        assert replay.grant.grant_id == first.grant.grant_id
        other = sc.CreateCommandGrant()
        other.CopyFrom(command)
        other.label = "changed"
        with pytest.raises(Rejected) as conflict:
            await client.request(other, timeout=15)
        assert conflict.value.code == "idempotency-conflict"
    finally:
        await client.close()
    async with serving.engine.connect() as conn:
        assert len((await conn.execute(select(command_grants))).all()) == 1
