"""Private Run log reads: ReadRunLog, GetRunLogRead and the Site's read-log results
(seed 001, Private Run log commands). Site Coordination is the
message-level double of execution_core_support."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from execution_core.domain import log_reads as lr
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from tests.integration.execution_core_support import (
    FAST,
    cmd_meta,
    happy_batch,
    query_meta,
    result,
    stack_factory,
)

pytestmark = pytest.mark.integration

LOG = (
    "".join(f"line {i}: computing\n" for i in range(200)) + "e2e-marker: the data file is missing\n"
)


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


def site_with_logs(answer):
    """happy_batch for the lifecycle; ``answer(cmd, payload)`` for read-log (None = hold)."""

    def script(cmd: sc.AppendSiteCommand, double):
        if cmd.kind == "read-log":
            return answer(cmd, json.loads(cmd.payload_json))
        return happy_batch(cmd, double)

    return script


def log_result(cmd, text: str = LOG, truncated: bool = False) -> dict:
    return result(cmd, log={"stage": "compute", "text": text, "truncated": truncated})


async def read(
    stack, run_id: str, *, member: str = "m-alice", command_id: str | None = None, **kw
) -> pb.ReadRunLogReply:
    kw.setdefault("stage", "compute")
    return await stack.client.request(
        pb.ReadRunLog(metadata=cmd_meta(member, command_id=command_id), run_id=run_id, **kw),
        timeout=15,
    )


async def poll(
    stack, read_id: str, member: str = "m-alice", timeout: float = 15.0
) -> pb.RunLogRead:
    """GetRunLogRead until the read is no longer pending."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await stack.client.request(
            pb.GetRunLogRead(metadata=query_meta(member), read_id=read_id), timeout=15
        )
        if got.state != "pending":
            return got
        assert asyncio.get_running_loop().time() < deadline, f"still pending: {got}"
        await asyncio.sleep(0.1)


async def finished_run(stack) -> str:
    run_id = await stack.launch()
    run = await stack.terminal(run_id)
    assert run.outcome == "succeeded"
    return run_id


async def test_a_ready_read_returns_the_text_and_names_its_viewer(make_stack):
    stack = await make_stack(script=site_with_logs(lambda cmd, payload: log_result(cmd)))
    run_id = await finished_run(stack)
    started = await read(stack, run_id, command_id="read-1", max_bytes=lr.MAX_LOG_BYTES)
    assert started.state == "pending"
    got = await poll(stack, started.read_id)
    assert (got.state, got.run_id, got.attempt_number, got.stage) == ("ready", run_id, 1, "compute")
    assert got.text == LOG and got.truncated is False and got.reason_code == ""

    # The read-log Site command: deterministic id per read, the viewer and the bound in its payload.
    sent = [c for c in stack.site.received if c.kind == "read-log"]
    assert len(sent) == 1
    assert sent[0].metadata.command_id == lr.site_command_id_for(started.read_id)
    assert json.loads(sent[0].payload_json) == {
        "stage": "compute",
        "max_bytes": lr.MAX_LOG_BYTES,
        "viewer": "m-alice",
        "read_id": started.read_id,
    }
    assert sent[0].run_id == run_id and sent[0].attempt_number == 1

    # The same command again is the same read; no second Site command.
    again = await read(stack, run_id, command_id="read-1", max_bytes=lr.MAX_LOG_BYTES)
    assert again.read_id == started.read_id
    await asyncio.sleep(0.3)
    assert len([c for c in stack.site.received if c.kind == "read-log"]) == 1

    # A read is for its viewer: another member (even with runs.read) does not find it.
    with pytest.raises(Rejected) as exc:
        await stack.client.request(
            pb.GetRunLogRead(metadata=query_meta("m-bob"), read_id=started.read_id), timeout=15
        )
    assert exc.value.code == "not-found"


async def test_text_beyond_max_bytes_keeps_its_tail_and_is_marked_truncated(make_stack):
    # The double ignores max_bytes; Execution Core still bounds what it keeps.
    stack = await make_stack(script=site_with_logs(lambda cmd, payload: log_result(cmd)))
    run_id = await finished_run(stack)
    started = await read(stack, run_id, max_bytes=37)
    got = await poll(stack, started.read_id)
    assert got.state == "ready" and got.truncated is True
    assert got.text == LOG.encode()[-37:].decode()
    assert got.text.endswith("e2e-marker: the data file is missing\n")


async def test_a_refused_permit_is_a_refused_read(make_stack):
    def refuse(cmd, payload):
        return result(cmd, "refused", code="authorisation-refused")

    stack = await make_stack(script=site_with_logs(refuse))
    run_id = await finished_run(stack)
    got = await poll(stack, (await read(stack, run_id)).read_id)
    assert (got.state, got.reason_code, got.text) == ("refused", "authorisation-refused", "")


async def test_an_unanswered_read_expires_and_a_late_answer_changes_nothing(make_stack):
    stack = await make_stack(
        settings=dataclasses.replace(FAST, log_read_seconds=0.5),
        script=site_with_logs(lambda cmd, payload: None),  # the Site never answers in time
    )
    run_id = await finished_run(stack)
    started = await read(stack, run_id)
    got = await poll(stack, started.read_id)
    assert (got.state, got.reason_code, got.text) == ("expired", "log-read-expired", "")

    command_id = lr.site_command_id_for(started.read_id)
    cmd = stack.site.held[command_id]
    message_id = await stack.site.resolve(command_id, log_result(cmd))
    await stack.consumed([message_id])
    got = await poll(stack, started.read_id)
    assert (got.state, got.text) == ("expired", "")


async def test_refusals_change_nothing(make_stack):
    stack = await make_stack(script=site_with_logs(lambda cmd, payload: log_result(cmd)))
    run_id = await finished_run(stack)
    for member in ("m-mallory",):  # not a member of the Project
        with pytest.raises(Rejected) as exc:
            await read(stack, run_id, member=member)
        assert exc.value.code == "permission-denied"
    # runs.read is asked now: without it m-bob may not read logs.
    text = stack.governance.read_text()
    stack.governance.write_text(
        text.replace("m-bob: [runs.read, pipelines.read]", "m-bob: [pipelines.read]")
    )
    with pytest.raises(Rejected) as exc:
        await read(stack, run_id, member="m-bob")
    assert exc.value.code == "permission-denied"
    for kw, code in (
        ({"stage": "scratch"}, "invalid-argument"),
        ({"max_bytes": lr.MAX_LOG_BYTES + 1}, "invalid-argument"),
        ({"attempt_number": -1}, "invalid-argument"),
        ({"attempt_number": 2}, "not-found"),
    ):
        with pytest.raises(Rejected) as exc:
            await read(stack, run_id, **kw)
        assert exc.value.code == code, kw
    with pytest.raises(Rejected) as exc:
        await read(stack, "00000000-0000-4000-8000-000000000000")
    assert exc.value.code == "not-found"
    with pytest.raises(Rejected) as exc:
        await read(stack, "no-such-run")
    assert exc.value.code == "invalid-argument"
    assert [c for c in stack.site.received if c.kind == "read-log"] == []


async def test_a_running_attempt_is_followed_from_offset_to_offset(make_stack):
    """A reader follows a growing log: each read from the last answer's next_offset."""
    grown = LOG.encode()

    def answer(cmd, payload):
        start = payload.get("offset")
        data = (
            grown[-payload["max_bytes"] :]
            if start is None
            else grown[start:][: payload["max_bytes"]]
        )
        begin = len(grown) - len(data) if start is None else min(start, len(grown))
        return result(
            cmd,
            log={
                "stage": "compute",
                "text": data.decode(),
                "truncated": begin + len(data) < len(grown) or begin > 0 and start is None,
                "offset": begin,
                "next_offset": begin + len(data),
                "size": len(grown),
            },
        )

    def running(cmd, double):
        if cmd.kind == "observe":
            return result(cmd, phase="running", native_state="RUNNING")
        if cmd.kind == "read-log":
            return answer(cmd, json.loads(cmd.payload_json))
        return happy_batch(cmd, double)

    stack = await make_stack(script=running)
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: r.phase == "running")
    tail = await poll(stack, (await read(stack, run_id, max_bytes=37)).read_id)
    assert tail.state == "ready" and tail.text == grown[-37:].decode()
    assert not tail.HasField("requested_offset")
    assert (tail.offset, tail.next_offset, tail.size) == (len(grown) - 37, len(grown), len(grown))

    first = await poll(stack, (await read(stack, run_id, max_bytes=100, offset=0)).read_id)
    assert first.text == grown[:100].decode() and first.truncated is True
    assert (first.requested_offset, first.offset, first.next_offset) == (0, 0, 100)
    sent = [json.loads(c.payload_json) for c in stack.site.received if c.kind == "read-log"]
    assert sent[-1]["offset"] == 0 and "offset" not in sent[0]

    grown += b"epoch 2: loss 0.1\n"
    rest = await poll(stack, (await read(stack, run_id, offset=first.next_offset)).read_id)
    assert rest.text == grown[100:].decode() and rest.truncated is False
    assert rest.next_offset == len(grown) == rest.size
    with pytest.raises(Rejected) as exc:
        await read(stack, run_id, offset=-1)
    assert exc.value.code == "invalid-argument"
    await stack.cancel(run_id)


async def test_an_answer_from_another_offset_is_malformed(make_stack):
    def answer(cmd, payload):
        return result(
            cmd,
            log={
                "stage": "compute",
                "text": "x",
                "truncated": False,
                "offset": 5,
                "next_offset": 6,
                "size": 6,
            },
        )

    stack = await make_stack(script=site_with_logs(answer))
    run_id = await finished_run(stack)
    got = await poll(stack, (await read(stack, run_id, offset=0)).read_id)
    assert (got.state, got.reason_code, got.text) == ("refused", lr.MALFORMED_CODE, "")
    # Without offsets (a Runtime from before them) a tail read stands, unfollowable.
    plain = await poll(stack, (await read(stack, run_id)).read_id)
    assert plain.state == "ready" and plain.text == "x"


async def test_answered_reads_are_deleted_after_the_retention(make_stack):
    stack = await make_stack(
        script=site_with_logs(lambda cmd, payload: log_result(cmd, "short\n")),
        settings=dataclasses.replace(FAST, log_read_retention_seconds=0.5),
    )
    run_id = await finished_run(stack)
    old = await poll(stack, (await read(stack, run_id)).read_id)
    assert old.state == "ready"
    await asyncio.sleep(1.0)
    new = await read(stack, run_id)  # deletes what is older than the retention
    with pytest.raises(Rejected) as exc:
        await stack.client.request(
            pb.GetRunLogRead(metadata=query_meta("m-alice"), read_id=old.read_id), timeout=15
        )
    assert exc.value.code == "not-found"
    assert (await poll(stack, new.read_id)).text == "short\n"


async def test_a_log_near_the_message_budget_travels_whole(make_stack):
    # The Runtime keeps a log's encoded text within the 4 MiB message budget (seed 001);
    # such a result and the reply carrying its text both fit the broker envelope.
    big = "x" * (4 * 1024 * 1024 - 128 * 1024)
    stack = await make_stack(script=site_with_logs(lambda cmd, payload: log_result(cmd, big)))
    run_id = await finished_run(stack)
    got = await poll(stack, (await read(stack, run_id)).read_id)
    assert got.state == "ready" and len(got.text) == len(big) and got.truncated is False
