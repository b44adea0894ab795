"""``metallo audit list`` against the real owners: Execution Core, Pipeline
Coordination and Site Coordination each answer for their own records; the CLI merges
them by time, filters by actor and time, and pages with one cursor per owner."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from execution_core.adaptors.governance_authority import GovernanceAuthority as CoreAuthority
from execution_core.adaptors.service import ExecutionCore
from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.governance import GovernanceFile
from metallo.messaging import OutboxRelay, Rejected, RequestClient
from metallo.persistence.engine import create_engine
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc
from pipeline_coordination.adaptors.governance_authority import (
    GovernanceAuthority as PipelineAuthority,
)
from pipeline_coordination.adaptors.service import PipelineCoordination
from site_coordination.adaptors.command_handlers import build_command_server
from site_coordination.adaptors.governance_authority import GovernanceAuthority as SiteAuthority
from tests.integration.site_coordination_support import prepare_payload
from tests.unit.cli_support import cli, cli_environment, log_in  # noqa: F401 - autouse fixture

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def log_in_as(edge, subject: str) -> None:
    """The CLI logged in with a real access token of ``subject`` from the edge's issuer."""
    token, _ = edge.issuer.issue_access(subject, "metallo-cli")
    log_in(Path(os.environ["METALLO_CREDENTIALS_FILE"]), token=token)


def meta(member: str = "m-alice") -> common_pb2.CommandMetadata:
    return common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member=member,
                                      project="demo")


@pytest.fixture
async def owners(edge, make_database, bus_url, topology, monkeypatch):
    """The three owners' command servers and relays (verifying the edge issuer's member
    tokens), each as its own principal, and a client that asserts members (as the Go
    API, a principal allowed to)."""
    monkeypatch.setenv("METALLO_OIDC_ISSUER", "https://issuer.test")
    monkeypatch.setenv("METALLO_OIDC_JWKS_URL", f"file:{edge.tmp / 'issuer' / 'jwks.json'}")
    monkeypatch.setenv("METALLO_GOVERNANCE_FILE", str(edge.governance_file))
    governance = GovernanceFile(edge.governance_file)
    engines = [create_engine(await make_database(name, ROOT / "services" / name / "migrations"),
                             pool_size=4)
               for name in ("execution_core", "pipeline_coordination")]
    parts = [
        ExecutionCore(engine=engines[0], amqp_url=bus_url("execution_core"), topology=topology,
                      authority=CoreAuthority(governance), parts=frozenset({"server", "relay"}),
                      relay_poll_seconds=0.05),
        PipelineCoordination(engine=engines[1], amqp_url=bus_url("pipeline_coordination"), topology=topology,
                             authority=PipelineAuthority(governance),
                             parts=frozenset({"server", "relay"}), relay_poll_seconds=0.05),
        build_command_server(edge.engine, bus_url("site_coordination"), topology,
                             SiteAuthority(edge.governance_file)),
        OutboxRelay(edge.engine, bus_url("site_coordination"), topology, owner="site_coordination",
                    poll_seconds=0.05),
        RequestClient(bus_url("go_api"), topology),
    ]
    for part in parts:
        await part.start()
    try:
        yield parts[-1]
    finally:
        await parts[-1].close()
        for part in reversed(parts[:-1]):
            await part.stop()
        for engine in engines:
            await engine.dispose()


async def audit_json(*args: str) -> dict:
    listed = await cli("audit", "list", "-o", "json", *args)
    assert listed.code == 0, listed.stderr
    return json.loads(listed.stdout)


async def test_audit_list_merges_the_owners_filters_and_pages(edge, owners):
    client = owners
    for _ in range(2):
        await client.request(ec.LaunchRun(metadata=meta(), workload_id="w-train", revision=1))
    with pytest.raises(Rejected):
        await client.request(ec.LaunchRun(metadata=meta("m-bob"), workload_id="w-train",
                                          revision=1))
    with pytest.raises(Rejected):  # no such Pipeline: a refused stop
        await client.request(pc.StopPipeline(metadata=meta(), pipeline_id=str(uuid.uuid4())))
    await edge.append("prepare", payload=prepare_payload())
    runtime = edge.client(await edge.grant())
    assert (await runtime.post("/v1/authorisations/read", json={
        "run_id": "run-1", "attempt_id": "att-1", "viewer": "m-bob", "read_kind": "logs",
        "path": "logs/compute.log", "max_bytes": 4096})).status_code == 200
    await client.request(ec.LaunchRun(metadata=meta(), workload_id="w-train", revision=1))

    log_in_as(edge, "lab-alice")
    everything = (await audit_json())["records"]
    assert [(r["service"], r["action"], r["decision"]) for r in everything] == [
        ("execution_core", "run.launch", "accepted"),
        ("execution_core", "run.launch", "accepted"),
        ("execution_core", "run.launch", "refused"),
        ("pipeline_coordination", "pipeline.stop", "refused"),
        ("site_coordination", "read-permit.issue", "accepted"),
        ("execution_core", "run.launch", "accepted"),
    ]
    assert (await audit_json())["next_page_token"] == ""

    bob = (await audit_json("--actor", "m-bob"))["records"]
    assert [(r["action"], r["code"]) for r in bob] == [("run.launch", "permission-denied"),
                                                       ("read-permit.issue", "")]
    since = (await audit_json("--since", everything[3]["recorded_at"]))["records"]
    assert [r["record_id"] for r in since] == [r["record_id"] for r in everything[3:]]

    pages, token = [], ""
    while True:
        page = await audit_json("--limit", "2", *(["--page-token", token] if token else []))
        pages.append([r["record_id"] for r in page["records"]])
        token = page["next_page_token"]
        if not token:
            break
    assert [len(p) for p in pages] == [2, 2, 2]
    assert [i for p in pages for i in p] == [r["record_id"] for r in everything]

    table = await cli("audit", "list", "--limit", "2")
    assert table.code == 0 and "run.launch" in table.stdout
    assert "more: metallo audit list --project demo --limit 2 --page-token" in table.stdout

    log_in_as(edge, "lab-bob")  # m-bob holds no audit.read
    refused = await cli("audit", "list", "--member", "m-bob")
    assert refused.code == 2 and "permission-denied" in refused.stderr


async def test_operators_list_the_platform_wide_records(edge, owners, monkeypatch):
    monkeypatch.setenv("METALLO_MEMBER", "m-operator")
    log_in_as(edge, "lab-operator")
    assert (await cli("site", "drain", "lab-slurm", "--reason", "kernel")).code == 0
    created = await cli("site", "grant", "create", "--site", "lab-slurm", "--environment",
                        "slurm", "--expires", "2h")
    assert created.code == 0, created.stderr
    records = (await audit_json("--platform"))["records"]
    assert [(r["service"], r["action"], r["actor"]) for r in records] == [
        ("execution_core", "site.drain", "m-operator"),
        ("site_coordination", "grant.create", "m-operator")]
    assert created.stdout.strip() not in json.dumps(records)  # the secret never
    assert (await audit_json())["records"] == []  # nothing in Project demo yet
    monkeypatch.setenv("METALLO_MEMBER", "m-alice")
    log_in_as(edge, "lab-alice")
    refused = await cli("audit", "list", "--platform")
    assert refused.code == 2 and "permission-denied" in refused.stderr


async def test_a_token_naming_another_member_is_recorded_as_the_tokens_member(edge, owners):
    """A forged acting member is refused, and the audit names who asked (the token's
    member), never the member the body named."""
    bobs, _ = edge.issuer.issue_access("lab-bob", "metallo-cli")
    forged = ec.LaunchRun(metadata=meta("m-alice"), workload_id="w-train", revision=1)
    with pytest.raises(Rejected) as refused:
        await owners.request(forged, member_token=bobs)
    assert refused.value.code == "member-token-mismatch"
    assert "'m-alice'" in refused.value.message and "'m-bob'" in refused.value.message

    log_in_as(edge, "lab-alice")
    records = (await audit_json())["records"]
    assert [(r["actor"], r["action"], r["code"]) for r in records] == [
        ("m-bob", "run.launch", "member-token-mismatch")]
