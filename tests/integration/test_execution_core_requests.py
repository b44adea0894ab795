"""Launch and cancel commands, queries and permissions."""

from __future__ import annotations

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected
from tests.integration.execution_core_support import (
    cmd_meta,
    happy_batch,
    query_meta,
    result,
    stack_factory,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


async def test_refused_permission_changes_nothing(make_stack):
    stack = await make_stack()
    with pytest.raises(Rejected) as exc:
        await stack.launch(member="m-bob")  # runs.read only
    assert exc.value.code == "permission-denied"
    assert "not a member" not in exc.value.message  # a member, without runs.launch
    with pytest.raises(Rejected) as exc:
        await stack.launch(member="m-mallory")  # not a member
    assert exc.value.code == "permission-denied"
    assert "(not a member of Project demo)" in exc.value.message
    reply = await stack.client.request(pb.ListRuns(metadata=query_meta("m-bob")), timeout=15)
    assert list(reply.runs) == []

    run_id = await stack.launch()
    with pytest.raises(Rejected) as exc:
        await stack.cancel(run_id, member="m-bob")
    assert exc.value.code == "permission-denied"
    with pytest.raises(Rejected) as exc:
        await stack.get(run_id, member="m-mallory")
    assert exc.value.code == "permission-denied"
    # A Project the governance file does not know: said so, naming no other Project.
    for request in (pb.GetRun(metadata=query_meta(project="other"), run_id=run_id),
                    pb.ListRuns(metadata=query_meta(project="other"))):
        with pytest.raises(Rejected) as exc:
            await stack.client.request(request, timeout=15)
        assert exc.value.code == "project-not-found"
        assert exc.value.message == "Project other is unknown to the Project authority"
    assert (await stack.get(run_id, member="m-bob")).run_id == run_id  # runs.read suffices to read

    # The permission is asked afresh: removing it from the governance file refuses the next launch.
    text = stack.governance.read_text().replace("        - runs.launch\n", "", 1)
    stack.governance.write_text(text)
    with pytest.raises(Rejected) as exc:
        await stack.launch()
    assert exc.value.code == "permission-denied"


async def test_duplicate_and_conflicting_commands(make_stack):
    stack = await make_stack(
        parts=frozenset({"server", "relay"})
    )  # no planning: keep Runs accepted
    launch = pb.LaunchRun(
        metadata=cmd_meta(command_id="launch-1"), workload_id="w-train", revision=1
    )
    first = await stack.client.request(launch, timeout=15)
    again = await stack.client.request(launch, timeout=15)
    assert again.run_id == first.run_id and first.phase == "accepted"
    changed = pb.LaunchRun(
        metadata=cmd_meta(command_id="launch-1"), workload_id="w-train", revision=2
    )
    with pytest.raises(Rejected) as exc:
        await stack.client.request(changed, timeout=15)
    assert exc.value.code == "idempotency-conflict"

    keyed = await stack.launch(
        launch_key="pipeline:p1:step:1", labels={"pipeline_id": "p1", "step": "1"}
    )
    assert (
        await stack.launch(launch_key="pipeline:p1:step:1") == keyed
    )  # new command id, same launch
    with pytest.raises(Rejected) as exc:
        await stack.launch("w-train", 2, launch_key="pipeline:p1:step:1")
    assert exc.value.code == "launch-key-conflict"

    listing = await stack.client.request(pb.ListRuns(metadata=query_meta()), timeout=15)
    assert sorted(r.run_id for r in listing.runs) == sorted([first.run_id, keyed])
    assert {r.run_id: dict(r.labels) for r in listing.runs}[keyed] == {
        "pipeline_id": "p1",
        "step": "1",
    }

    for bad in (
        pb.LaunchRun(metadata=cmd_meta(), workload_id="", revision=1),
        pb.LaunchRun(metadata=cmd_meta(), workload_id="w", revision=0),
        pb.LaunchRun(metadata=cmd_meta(), workload_id="w", revision=1, repository_commit="main"),
    ):
        with pytest.raises(Rejected) as exc:
            await stack.client.request(bad, timeout=15)
        assert exc.value.code == "invalid-argument"


async def test_cancel_before_planning_and_twice(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    run_id = await stack.launch()
    first = await stack.cancel(run_id)
    assert first.cancel_recorded and first.phase == "terminal" and first.outcome == "cancelled"
    second = await stack.cancel(run_id)
    assert not second.cancel_recorded and second.outcome == "cancelled"
    run = await stack.get(run_id)
    assert (run.reason_code, run.cancel_reason, run.cancelled_by) == (
        "cancelled-before-start",
        "not needed",
        "m-alice",
    )
    assert [(t.version, t.phase, t.desired_state) for t in run.history] == [
        (1, "accepted", "run"),
        (2, "terminal", "cancel"),
    ]
    (done,) = await stack.wait_events(pb.RunCompleted, run_id)
    assert done.outcome == "cancelled"
    with pytest.raises(Rejected) as exc:
        await stack.cancel("00000000-0000-4000-8000-000000000000")
    assert exc.value.code == "not-found"
    for malformed in ("no-such-run", run_id.upper(), run_id.replace("-", "")):
        with pytest.raises(Rejected) as exc:
            await stack.cancel(malformed)
        assert exc.value.code == "invalid-argument" and "not a Run id" in exc.value.message


async def test_cancel_before_start_fences_the_start(make_stack):
    def hold_prepare(cmd, double):
        if cmd.kind == "prepare":
            return None
        return happy_batch(cmd, double)

    stack = await make_stack(script=hold_prepare)
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: r.phase == "preparing" and len(r.attempts) == 1)
    while not stack.site.held:
        await __import__("asyncio").sleep(0.05)
    reply = await stack.cancel(run_id)
    assert reply.cancel_recorded
    run = await stack.terminal(run_id)
    assert (run.outcome, run.reason_code) == ("cancelled", "cancelled-before-start")
    # The late prepare result changes nothing, and no start is ever sent.
    (prepare_id,) = list(stack.site.held)
    await stack.site.resolve(prepare_id, result(stack.site.received[0], phase="prepared"))
    await stack.wait_events(pb.RunCompleted, run_id)
    run = await stack.get(run_id)
    assert run.outcome == "cancelled" and "start" not in [k for _, k in stack.site.kinds(run_id)]


async def test_cancel_while_running_observes_then_ends(make_stack):
    def running_until_cancelled(cmd, double):
        if cmd.kind == "observe":
            if double.count(cmd.attempt_id, "cancel"):
                return result(cmd, phase="cancelled", native_state="CANCELLED")
            return result(cmd, phase="running", native_state="RUNNING")
        return happy_batch(cmd, double)

    stack = await make_stack(script=running_until_cancelled)
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: r.phase == "running")
    assert (await stack.cancel(run_id)).cancel_recorded
    run = await stack.terminal(run_id)
    assert (run.outcome, run.reason_code, run.native_state) == (
        "cancelled",
        "cancelled-by-member",
        "CANCELLED",
    )
    kinds = [k for _, k in stack.site.kinds(run_id)]
    assert kinds.count("cancel") == 1 and kinds[-1] == "observe"
    assert run.attempts[0].state == "cancelled"
    stack.site.assert_no_duplicates()


async def test_cancel_after_completion_changes_nothing(make_stack):
    stack = await make_stack()
    run_id = await stack.launch()
    await stack.terminal(run_id)
    reply = await stack.cancel(run_id)
    assert not reply.cancel_recorded and reply.outcome == "succeeded"
    run = await stack.get(run_id)
    assert run.desired_state == "run" and run.outcome == "succeeded"
    assert "cancel" not in [k for _, k in stack.site.kinds(run_id)]


async def test_list_runs_filters_and_pages(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    ids = [await stack.launch() for _ in range(3)]
    await stack.cancel(ids[0])
    seen, token = [], ""
    while True:
        page = await stack.client.request(
            pb.ListRuns(metadata=query_meta(), page={"page_size": 2, "page_token": token}),
            timeout=15,
        )
        seen += [r.run_id for r in page.runs]
        token = page.page.next_page_token
        if not token:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 3
    active = await stack.client.request(
        pb.ListRuns(metadata=query_meta(), active_only=True), timeout=15
    )
    assert sorted(r.run_id for r in active.runs) == sorted(ids[1:])
    cancelled = await stack.client.request(
        pb.ListRuns(metadata=query_meta(), outcome="cancelled"), timeout=15
    )
    assert [r.run_id for r in cancelled.runs] == [ids[0]]
    with pytest.raises(Rejected) as exc:
        await stack.client.request(pb.ListRuns(metadata=query_meta(), phase="bogus"), timeout=15)
    assert exc.value.code == "invalid-argument"


async def test_unreadable_governance_is_a_transient_refusal(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    good = stack.governance.read_text()
    stack.governance.write_text("version: 1\nprojects: [not, a, mapping\n")
    launch = pb.LaunchRun(
        metadata=cmd_meta(command_id="launch-t"), workload_id="w-train", revision=1
    )
    with pytest.raises(Rejected) as exc:
        await stack.client.request(launch, timeout=15)
    assert (
        exc.value.code == "governance-unavailable" and exc.value.details.get("transient") == "true"
    )
    stack.governance.write_text(good)
    reply = await stack.client.request(launch, timeout=15)  # same command_id, decided afresh
    assert reply.phase == "accepted"
