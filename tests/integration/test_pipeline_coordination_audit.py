"""Pipeline Coordination audits starting, stopping and rerunning Pipelines in the
deciding transaction (docs/operators.md, Audit) and answers ListAuditRecords."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from metallo.common.v1 import common_pb2
from metallo.messaging import Rejected
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from tests.integration.audit_support import all_audit_text, audit_rows, receipt_time
from tests.integration.pipeline_coordination_support import build, teardown

pytestmark = pytest.mark.integration


@pytest.fixture
async def h(make_database, amqp_url, topology, tmp_path):
    harness = await build(make_database, amqp_url, topology, tmp_path)
    yield harness
    await teardown(harness)


async def test_start_stop_and_refusals_are_recorded(h):
    started = await h.start_pipeline(command_id=str(uuid.uuid4()), actions=("eval",))
    with pytest.raises(Rejected):
        await h.start_pipeline(member="m-bob")
    password = "glpat-" + "x9" * 10
    # A repository URL carrying a password: the audit keeps the URL without it.
    await h.client.request(pb.StartPipeline(
        metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()),
                                            acting_member="m-alice", project="demo"),
        repository_url=f"https://alice:{password}@git.example/demo.git", branch="main"))
    await h.stop_pipeline(started.pipeline_id, reason="enough")

    start, bob, secret_url, stop = await audit_rows(h.engine)
    assert (start["action"], start["decision"], start["affected"]) == (
        "pipeline.start", "accepted", {"pipeline_id": started.pipeline_id})
    async with h.engine.connect() as conn:
        created_at = (await conn.execute(text(
            "SELECT created_at FROM pipelines WHERE pipeline_id = :p"),
            {"p": started.pipeline_id})).scalar_one()
    assert start["recorded_at"] == created_at == await receipt_time(h.engine,
                                                                    start["request_id"])
    assert (bob["actor"], bob["decision"], bob["code"]) == ("m-bob", "refused",
                                                            "permission-denied")
    assert secret_url["summary"]["repository_url"] == (
        "https://[redacted]@git.example/demo.git")
    assert password not in await all_audit_text(h.engine)
    assert (stop["action"], stop["summary"]["reason"]) == ("pipeline.stop", "enough")

    listed = await h.client.request(pb.ListAuditRecords(
        metadata=common_pb2.QueryMetadata(acting_member="m-alice", project="demo"),
        filter=common_pb2.AuditFilter(actor="m-alice")))
    assert [r.action for r in listed.records] == ["pipeline.start"] * 2 + ["pipeline.stop"]
    assert {r.service for r in listed.records} == {"pipeline_coordination"}
    with pytest.raises(Rejected) as refused:
        await h.client.request(pb.ListAuditRecords(
            metadata=common_pb2.QueryMetadata(acting_member="m-bob", project="demo")))
    assert refused.value.code == "permission-denied"
