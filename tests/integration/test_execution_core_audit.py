"""Execution Core audits every decision in the transaction that decides it
(docs/operators.md, Audit): accepted and refused launches, cancellations, reruns,
log reads and drains, with a redacted summary; a rolled-back decision leaves none;
ListAuditRecords is capability-checked and paged."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import text

from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import OutcomeUncertain, Rejected
from metallo.operator_requests import operator_metadata
from tests.bus import BUS
from tests.integration.audit_support import (
    all_audit_text,
    allow_commits,
    audit_rows,
    receipt_time,
    refuse_commits,
)
from tests.integration.execution_core_support import cmd_meta, query_meta, stack_factory

pytestmark = pytest.mark.integration

GRANT = "psb_" + "A1b2C3d4" * 5
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtLWFsaWNlIn0.c2lnbmF0dXJlLXZhbHVl"


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


def audit_query(member: str = "m-alice", project: str = "demo", **filters) -> pb.ListAuditRecords:
    page = common_pb2.PageRequest(page_size=filters.pop("page_size", 0),
                                  page_token=filters.pop("page_token", ""))
    return pb.ListAuditRecords(metadata=query_meta(member, project),
                               filter=common_pb2.AuditFilter(page=page, **filters))


async def test_accepted_and_refused_launches_are_recorded_with_their_decision(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    accepted = pb.LaunchRun(metadata=cmd_meta(), workload_id="w-train", revision=1,
                            labels={"note": f"token {GRANT}"})
    reply = await stack.client.request(accepted, timeout=15)
    refused = pb.LaunchRun(metadata=cmd_meta("m-bob"), workload_id="w-train", revision=1)
    with pytest.raises(Rejected):
        await stack.client.request(refused, timeout=15)
    await stack.client.request(accepted, timeout=15)  # a replay decides nothing

    [ok] = await audit_rows(stack.engine, request_id=accepted.metadata.command_id)
    assert (ok["actor"], ok["project"], ok["action"], ok["decision"], ok["code"]) == (
        "m-alice", "demo", "run.launch", "accepted", "")
    assert ok["affected"] == {"run_id": reply.run_id, "workload_id": "w-train"}
    assert ok["principal"] == BUS.user("go_api") and ok["correlation_id"]
    assert ok["summary"]["workload_id"] == "w-train" and ok["summary"]["revision"] == "1"
    # The deciding transaction: the same now() as the Run's acceptance and the receipt.
    async with stack.engine.connect() as conn:
        accepted_at = (await conn.execute(text("SELECT accepted_at FROM runs WHERE run_id = :r"),
                                          {"r": reply.run_id})).scalar_one()
    assert ok["recorded_at"] == accepted_at == await receipt_time(
        stack.engine, accepted.metadata.command_id)

    [no] = await audit_rows(stack.engine, request_id=refused.metadata.command_id)
    assert (no["actor"], no["decision"], no["code"]) == ("m-bob", "refused", "permission-denied")
    assert no["recorded_at"] == await receipt_time(stack.engine, refused.metadata.command_id)
    assert GRANT not in await all_audit_text(stack.engine)  # the label's token is redacted
    assert "[redacted]" in ok["summary"]["labels"]["note"]


async def test_cancel_rerun_log_read_and_drain_are_recorded_without_secrets(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    run_id = await stack.launch()
    reason = f"Authorization: Bearer {JWT} and {GRANT}"
    await stack.cancel(run_id, reason=reason)
    rerun = await stack.client.request(pb.RerunRun(metadata=cmd_meta(), run_id=run_id), timeout=15)
    with pytest.raises(Rejected):  # no Attempt yet: a refused read is a decision too
        await stack.client.request(pb.ReadRunLog(
            metadata=cmd_meta(), run_id=rerun.run_id, stage="compute", max_bytes=100),
            timeout=15)
    operator = operator_metadata("m-operator")
    await stack.client.request(pb.DrainSite(metadata=operator, site_id="lab-slurm",
                                            reason=f"upgrade {GRANT}"), timeout=15)
    await stack.client.request(pb.ResumeSite(metadata=operator_metadata("m-operator"),
                                             site_id="lab-slurm"), timeout=15)

    rows = {r["action"]: r for r in await audit_rows(stack.engine)}
    assert rows["run.cancel"]["affected"] == {"run_id": run_id}
    assert rows["run.cancel"]["summary"]["reason"].count("[redacted]") == 2
    assert rows["run.rerun"]["affected"] == {"run_id": run_id, "rerun_of": run_id}
    assert rows["run.read-log"]["affected"] == {"run_id": rerun.run_id}
    assert (rows["run.read-log"]["decision"], rows["run.read-log"]["code"]) == ("refused",
                                                                                "not-found")
    assert rows["site.drain"]["project"] == "" and rows["site.drain"]["actor"] == "m-operator"
    assert rows["site.drain"]["affected"] == {"site_id": "lab-slurm"}
    assert rows["site.resume"]["decision"] == "accepted"
    stored = await all_audit_text(stack.engine)
    assert GRANT not in stored and JWT not in stored and "Bearer" not in stored


async def test_a_rolled_back_decision_leaves_no_record(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    await refuse_commits(stack.engine, "runs")  # the launch is decided, then rolls back
    doomed = pb.LaunchRun(metadata=cmd_meta(), workload_id="w-train", revision=1)
    with pytest.raises(OutcomeUncertain):
        await stack.client.request(doomed, timeout=3)
    assert await audit_rows(stack.engine, request_id=doomed.metadata.command_id) == []
    async with stack.engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM runs"))).scalar_one() == 0
    await allow_commits(stack.engine, "runs")
    # The same path without the failure records its decision.
    await stack.launch()
    assert [r["action"] for r in await audit_rows(stack.engine, decision="accepted")] == [
        "run.launch"]


async def test_audit_list_is_capability_checked_filtered_and_paged(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    for _ in range(3):
        await stack.launch()
    with pytest.raises(Rejected):
        await stack.launch(member="m-bob")
    await stack.client.request(pb.DrainSite(metadata=operator_metadata("m-operator"),
                                            site_id="lab-slurm"), timeout=15)

    first = await stack.client.request(audit_query(page_size=2), timeout=15)
    assert [r.action for r in first.records] == ["run.launch", "run.launch"]
    assert first.page.next_page_token == first.records[-1].cursor
    second = await stack.client.request(
        audit_query(page_size=2, page_token=first.page.next_page_token), timeout=15)
    assert [(r.actor, r.decision) for r in second.records] == [("m-alice", "accepted"),
                                                                ("m-bob", "refused")]
    assert not second.page.next_page_token
    assert len({r.record_id for r in [*first.records, *second.records]}) == 4
    assert all(r.service == "execution_core" and r.project == "demo" for r in second.records)
    assert json.loads(second.records[1].summary_json)["workload_id"] == "w-train"

    bob = await stack.client.request(audit_query(actor="m-bob"), timeout=15)
    assert [r.code for r in bob.records] == ["permission-denied"]
    later = await stack.client.request(audit_query(since=second.records[1].recorded_at),
                                       timeout=15)
    assert [r.record_id for r in later.records] == [second.records[1].record_id]
    # The operator reads any Project and the platform-wide records; m-bob lacks audit.read.
    platform = await stack.client.request(audit_query("m-operator", ""), timeout=15)
    assert [r.action for r in platform.records] == ["site.drain"]
    assert len((await stack.client.request(audit_query("m-operator"), timeout=15)).records) == 4
    for query in (audit_query("m-bob"), audit_query("m-alice", "")):
        with pytest.raises(Rejected) as refused:
            await stack.client.request(query, timeout=15)
        assert refused.value.code == "permission-denied"
    for bad in (audit_query(page_size=201), audit_query(since="yesterday"),
                audit_query(page_token="not-a-token")):
        with pytest.raises(Rejected) as refused:
            await stack.client.request(bad, timeout=15)
        assert refused.value.code == "invalid-argument"
    assert uuid.UUID(first.records[0].request_id)


async def test_a_request_refused_at_intake_is_recorded_without_its_token(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    launch = pb.LaunchRun(metadata=cmd_meta(), workload_id="w-train", revision=1)
    with pytest.raises(Rejected) as refused:  # this Execution Core accepts no member tokens
        await stack.client.request(launch, timeout=15, member_token=JWT)
    assert refused.value.code == "member-token-rejected"
    [row] = await audit_rows(stack.engine, request_id=launch.metadata.command_id)
    assert (row["decision"], row["code"], row["actor"]) == ("refused", "member-token-rejected",
                                                            "m-alice")
    assert JWT not in await all_audit_text(stack.engine)
