"""Pipelines end to end over real PostgreSQL, RabbitMQ and git (seed 004 §8A–§8C, §8E).

Workload Portfolio and Execution Core are message-level doubles
(tests/integration/pipeline_coordination_doubles.py); the test plays each
step's Run: it pushes to the real repository, then completes the Run.
"""

from __future__ import annotations

import dataclasses

import pytest

from metallo.common.v1 import common_pb2
from metallo.messaging import Rejected
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from tests.integration.pipeline_coordination_repo import ACTIONS
from tests.integration.pipeline_coordination_support import FAST, build, teardown

SERVICE_THEN_BATCH = """\
version: 1
actions:
  serve:
    type: k8s-deployment
    command: [python, app.py]
  probe:
    type: k8s-job
    command: [python, probe.py]
"""


@pytest.fixture
async def h(make_database, amqp_url, topology, tmp_path):
    harness = await build(make_database, amqp_url, topology, tmp_path)
    yield harness
    await teardown(harness)


async def test_two_step_hand_off_pins_step_2_to_what_step_1_pushed(h):
    await h.coordinator().start()
    initial = h.repo.head()
    reply = await h.start_pipeline()
    pid = reply.pipeline_id
    assert reply.state == "preparing"

    p = await h.until_step(pid, 1, "launched")
    first = h.runs.launch_for(1)
    assert first.repository_commit == initial and first.launch_key == p.step(1).launch_key(pid)
    assert first.labels["pipeline_id"] == pid and first.labels["pipeline_action"] == "train"
    assert [s.action for s in p.steps] == ["train", "eval"]  # actions.yaml order

    # Step 1's Run pushes its output (and a changed eval action), then completes.
    pushed = h.repo.push(
        {"model.bin": "weights\n", "actions.yaml": ACTIONS.replace("eval.py]", "eval.py, --fast]")},
        "trained model",
    )
    run1 = h.runs.run_for(1).run_id
    await h.runs.complete(run1, "succeeded", output_commit=pushed)
    await h.runs.republish(run1)  # a duplicate RunCompleted (new message id)

    p = await h.until_step(pid, 2, "launched")
    second = h.runs.launch_for(2)
    assert second.repository_commit == pushed, "step 2 must read what step 1 pushed"
    step2 = p.step(2)
    assert step2.pinned_commit == pushed
    assert (step2.prepared_revision, step2.revision) == (1, 2)  # re-prepared: actions.yaml changed
    assert second.revision == 2

    await h.runs.complete(h.runs.run_for(2).run_id, "succeeded", output_commit=h.repo.push({"score": "0.9\n"}, "eval"))
    await h.until_state(pid, "succeeded")

    got = await h.get(pid)
    assert [(s.state, s.run_outcome) for s in got.steps] == [("succeeded", "succeeded"), ("succeeded", "succeeded")]
    assert got.steps[0].output_commit == pushed and got.steps[1].pinned_commit == pushed
    assert got.steps[0].launch_command_id == first.metadata.command_id
    events = await h.completed_events(pid)
    assert len(events) == 1 and events[0].outcome == "succeeded"
    h.runs.assert_one_launch_per_step()
    assert len(h.runs.launches) == 2

    listed = await h.client.request(
        pb.ListPipelines(metadata=common_pb2.QueryMetadata(acting_member="m-bob", project="demo"))
    )
    assert [x.pipeline_id for x in listed.pipelines] == [pid]
    assert listed.pipelines[0].steps[1].pinned_commit == pushed


async def test_failing_step_fails_the_pipeline_with_step_and_reason(h):
    await h.coordinator().start()
    pid = (await h.start_pipeline()).pipeline_id
    await h.until_step(pid, 1, "launched")
    await h.runs.complete(h.runs.run_for(1).run_id, "failed", reason="exit-nonzero")
    p = await h.until_state(pid, "failed")
    assert p.failed_step == 1 and p.reason_code == "exit-nonzero"
    assert p.step(2).state == "skipped"
    assert h.runs.launch_for(2) is None
    events = await h.completed_events(pid)
    assert [(e.outcome, e.failed_step, e.failed_action) for e in events] == [("failed", 1, "train")]


async def test_stop_during_step_1_cancels_its_run_and_never_launches_step_2(h):
    await h.coordinator().start()
    pid = (await h.start_pipeline()).pipeline_id
    await h.until_step(pid, 1, "launched")

    with pytest.raises(Rejected) as refused:
        await h.stop_pipeline(pid, member="m-bob")
    assert refused.value.code == "permission-denied"

    reply = await h.stop_pipeline(pid)
    assert reply.stop_recorded
    assert not (await h.stop_pipeline(pid)).stop_recorded

    p = await h.until_state(pid, "stopped")
    assert p.step(1).state == "cancelled" and p.step(2).state == "skipped"
    assert [c.run_id for c in h.runs.cancels] == [h.runs.run_for(1).run_id]
    assert h.runs.cancels[0].metadata.acting_member == "m-alice"
    assert h.runs.launch_for(2) is None
    assert [e.outcome for e in await h.completed_events(pid)] == ["stopped"]


async def test_start_is_permission_checked_validated_and_idempotent(h):
    with pytest.raises(Rejected) as e:
        await h.start_pipeline(member="m-bob")
    assert e.value.code == "permission-denied"
    with pytest.raises(Rejected) as e:
        await h.start_pipeline(actions=("train", "train"))
    assert e.value.code == "invalid-argument"
    first = await h.start_pipeline(command_id="c-1", actions=("eval",))
    again = await h.start_pipeline(command_id="c-1", actions=("eval",))
    assert again.pipeline_id == first.pipeline_id
    with pytest.raises(Rejected) as e:
        await h.start_pipeline(command_id="c-1", actions=("train",))
    assert e.value.code == "idempotency-conflict"
    with pytest.raises(Rejected) as e:
        await h.get(first.pipeline_id, member="m-nobody")
    assert e.value.code == "permission-denied"

    # An explicit list runs only those actions, in the given order.
    await h.coordinator().start()
    p = await h.until_step(first.pipeline_id, 1, "launched")
    assert [s.action for s in p.steps] == ["eval"]


async def test_a_branch_that_cannot_be_prepared_fails_before_any_step(h):
    h.portfolio.refusals = ["actions-invalid"]
    await h.coordinator().start()
    pid = (await h.start_pipeline()).pipeline_id
    p = await h.until_state(pid, "failed")
    assert p.reason_code == "actions-invalid" and p.steps == ()
    assert h.runs.launches == []


async def test_a_try_later_refusal_is_retried_under_a_new_command_id(h):
    """source-unavailable is saved under its command_id by Workload Portfolio: the retry needs a new one."""
    h.portfolio.refusals = ["source-unavailable", "source-unavailable"]
    await h.coordinator().start()
    pid = (await h.start_pipeline()).pipeline_id
    p = await h.until_step(pid, 1, "launched")
    assert p.request_round == 2 and p.state == "running"
    assert [kind for kind, _ in h.portfolio.calls] == ["branch", "branch", "branch", "action"]


async def test_service_step_advances_once_healthy_and_stop_cancels_the_ready_service(make_database, amqp_url, topology, tmp_path):
    h = await build(make_database, amqp_url, topology, tmp_path, SERVICE_THEN_BATCH)
    try:
        await h.coordinator().start()
        pid = (await h.start_pipeline()).pipeline_id
        await h.until_step(pid, 1, "launched")
        serve = h.runs.run_for(1)
        assert h.runs.launch_for(2) is None  # not healthy yet: step 2 waits
        h.runs.serve_ready(serve.run_id, "https://serve.demo.example.org")
        p = await h.until_step(pid, 2, "launched")
        assert p.step(1).state == "ready" and p.step(1).endpoint == "https://serve.demo.example.org"
        await h.runs.complete(h.runs.run_for(2).run_id, "succeeded")
        p = await h.until_state(pid, "succeeded")
        assert h.runs.cancels == []  # a finished Pipeline keeps its ready service

        assert (await h.stop_pipeline(pid)).stop_recorded
        await h.until_step(pid, 1, "cancelled")
        assert [c.run_id for c in h.runs.cancels] == [serve.run_id]
        assert [e.outcome for e in await h.completed_events(pid)] == ["succeeded"]
    finally:
        await teardown(h)


async def test_a_lost_run_completed_is_made_up_by_the_safety_re_read(h):
    await h.coordinator(settings=dataclasses.replace(FAST, batch_recheck_seconds=0.3)).start()
    pid = (await h.start_pipeline(actions=("train", "eval"))).pipeline_id
    await h.until_step(pid, 1, "launched")
    pushed = h.repo.push({"model.bin": "weights\n"}, "trained")
    h.runs.end_silently(h.runs.run_for(1).run_id, "succeeded", output_commit=pushed)
    p = await h.until_step(pid, 2, "launched")
    assert p.step(1).state == "succeeded" and p.step(1).output_commit == pushed
    assert p.step(2).pinned_commit == pushed
