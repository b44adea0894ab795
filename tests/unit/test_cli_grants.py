"""``metallo site grant …`` and ``metallo site drain|resume|drains``: the operator
requests the CLI sends on the real broker (a stand-in answers for the owners) and
what it prints. The owners' own rules: tests/integration/test_operator_requests.py."""

from __future__ import annotations

import hashlib
import json

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, Topology
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
)

GRANT = sc.CommandGrant(grant_id="cg-0123456789abcdef", site_id="lab-slurm",
                        environment="slurm", label="test runtime",
                        created_at="2026-12-01T10:00:00+00:00",
                        expires_at="2026-12-01T12:00:00+00:00")


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


@pytest.fixture(autouse=True)
def operator(monkeypatch):
    monkeypatch.setenv("METALLO_MEMBER", "m-operator")
    monkeypatch.delenv("METALLO_PROJECT")  # operator requests name no Project


async def test_create_sends_only_the_secret_hash_and_prints_the_secret_once(amqp_url, topology):
    def create(cmd: sc.CreateCommandGrant) -> sc.CreateCommandGrantReply:
        return sc.CreateCommandGrantReply(grant=GRANT)

    async with StandIn(amqp_url, topology, ("site_coordination",),
                       {"CreateCommandGrant": create}) as s:
        created = await cli("site", "grant", "create", "--site", "lab-slurm",
                            "--environment", "slurm", "--expires", "2h", "--label", "test runtime")
    assert created.code == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("psb_") and len(secret) == 47
    assert "shown only now" in created.stderr and secret not in created.stderr
    sent = s.received[0]
    assert sent.metadata.acting_member == "m-operator" and sent.metadata.project == ""
    assert (sent.site_id, sent.environment, sent.expires, sent.label) == (
        "lab-slurm", "slurm", "2h", "test runtime")
    assert sent.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in sent.SerializeToString().decode("utf-8", "replace")


async def test_list_and_revoke(amqp_url, topology):
    revoked = sc.CommandGrant()
    revoked.CopyFrom(GRANT)
    revoked.revoked_at = "2026-12-01T11:00:00+00:00"
    answers = {"ListCommandGrants": lambda q: sc.ListCommandGrantsReply(grants=[GRANT, revoked]),
               "RevokeCommandGrant": lambda c: sc.RevokeCommandGrantReply(
                   grant_id=c.grant_id, revoked=c.grant_id == GRANT.grant_id)}
    async with StandIn(amqp_url, topology, ("site_coordination",), answers) as s:
        listed = await cli("site", "grant", "list", "--output", "json")
        table = await cli("site", "grant", "list")
        done = await cli("site", "grant", "revoke", GRANT.grant_id)
        missing = await cli("site", "grant", "revoke", "cg-unknown")
    grants = json.loads(listed.stdout)["grants"]
    assert [g["revoked_at"] for g in grants] == [None, "2026-12-01T11:00:00+00:00"]
    assert grants[0]["site"] == "lab-slurm" and grants[0]["environment"] == "slurm"
    assert GRANT.grant_id in table.stdout and "test runtime" in table.stdout
    assert done.code == 0 and f"revoked {GRANT.grant_id}" in done.stdout
    assert missing.code == 3 and "no active grant" in missing.stderr and "next:" in missing.stderr
    assert s.names() == ["ListCommandGrants", "ListCommandGrants", "RevokeCommandGrant",
                         "RevokeCommandGrant"]


async def test_refusals_keep_their_codes_and_exits(amqp_url, topology):
    def refuse(cmd):
        if cmd.site_id == "nosuch":
            raise Rejected("site-not-found", "no Site 'nosuch' in the governance file")
        raise Rejected("permission-denied",
                       "member m-operator does not hold the operator capability sites.grants")

    async with StandIn(amqp_url, topology, ("site_coordination",),
                       {"CreateCommandGrant": refuse}):
        unknown = await cli("site", "grant", "create", "--site", "nosuch", "--environment", "slurm")
        denied = await cli("site", "grant", "create", "--site", "lab-slurm",
                           "--environment", "slurm")
    assert unknown.code == 3 and "site-not-found" in unknown.stderr and unknown.stdout == ""
    assert denied.code == 2 and "sites.grants" in denied.stderr and "Operators" in denied.stderr


async def test_no_operator_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("METALLO_MEMBER")
    result = await cli("site", "drain", "lab-slurm")
    assert result.code == 2 and "no acting operator" in result.stderr


async def test_drain_resume_and_list(amqp_url, topology):
    drain = ec.SiteDrain(site_id="lab-slurm", drained_by="m-operator",
                         drained_at="2026-12-01T10:00:00+00:00", reason="kernel", active_runs=3)
    answers = {
        "DrainSite": lambda c: ec.DrainSiteReply(drain=drain, already_draining=False),
        "ResumeSite": lambda c: ec.ResumeSiteReply(site_id=c.site_id, was_draining=True,
                                                   runs_woken=2),
        "ListSiteDrains": lambda q: ec.ListSiteDrainsReply(drains=[drain]),
    }
    async with StandIn(amqp_url, topology, ("execution_core",), answers) as s:
        drained = await cli("site", "drain", "lab-slurm", "--reason", "kernel")
        listed = await cli("site", "drains", "-o", "json")
        resumed = await cli("site", "resume", "lab-slurm")
    assert drained.code == 0, drained.stderr
    assert "lab-slurm draining" in drained.stdout and "3 active Run(s)" in drained.stdout
    assert json.loads(listed.stdout)["drains"][0] == {
        "site": "lab-slurm", "drained_by": "m-operator", "drained_at": "2026-12-01T10:00:00+00:00",
        "reason": "kernel", "active_runs": 3}
    assert resumed.code == 0 and "2 waiting Run(s) planned again" in resumed.stdout
    sent = s.received[0]
    assert (sent.site_id, sent.reason, sent.metadata.acting_member) == (
        "lab-slurm", "kernel", "m-operator")
    assert sent.metadata.command_id
