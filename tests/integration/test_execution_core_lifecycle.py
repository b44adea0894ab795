"""Execution Core end to end on real PostgreSQL and RabbitMQ.

Site Coordination and Workload Portfolio are doubles at the message level only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from sqlalchemy import text

from metallo.execution_core.v1 import execution_core_pb2 as pb
from tests.integration.execution_core_support import (
    COMMIT,
    FAST,
    happy_batch,
    result,
    revision,
    stack_factory,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


async def test_queued_batch_whole_lifecycle(make_stack):
    stack = await make_stack()
    run_id = await stack.launch()
    run = await stack.terminal(run_id)

    assert (run.outcome, run.reason_code, run.phase, run.desired_state) == (
        "succeeded",
        "completed",
        "terminal",
        "run",
    )
    assert (
        run.site_id == "lab-slurm" and run.environment == "slurm" and run.family == "queued-batch"
    )
    assert run.initiating_member == "m-alice" and run.output_commit == "f" * 40
    assert [(p.role, p.commit) for p in run.repositories] == [("action", COMMIT)]
    assert (
        run.observation_phase == "succeeded"
        and run.native_state == "COMPLETED"
        and run.exit.exit_code == 0
    )
    (attempt,) = run.attempts
    assert (
        attempt.number == 1 and attempt.state == "succeeded" and len(attempt.material_digest) == 64
    )
    assert [(j.stage, j.job_id) for j in attempt.native_jobs] == [("compute", "job-1")]

    phases = [t.phase for t in run.history]  # the transition log, oldest first
    assert phases[0] == "accepted" and phases[-1] == "terminal" and "running" in phases
    assert phases.index("preparing") < phases.index("starting") < phases.index("running")
    versions = [t.version for t in run.history]
    assert versions == sorted(set(versions)) and versions[-1] == run.version
    assert run.history[-1].outcome == "succeeded" and run.history[-1].attempt_number == 1

    kinds = [k for _, k in stack.site.kinds(run_id)]
    assert kinds == ["prepare", "start", "observe", "observe"]
    # Each command names the one before it, so Site Coordination's replicas append them
    # in this order whichever handles which first (ADR 0034).
    sent = [c for c in stack.site.received if c.run_id == run_id]
    assert [c.after_command_id for c in sent] == ["", *(c.metadata.command_id for c in sent[:-1])]
    prepare = json.loads(stack.site.received[0].payload_json)
    assert prepare["material_digest"] == attempt.material_digest
    assert prepare["member"] == {"id": "m-alice", "site_username": "alice", "account": "demo"}
    assert prepare["repository"]["commit"] == COMMIT and prepare["deadline"].endswith("Z")
    stack.site.assert_no_duplicates()

    (done,) = await stack.wait_events(pb.RunCompleted, run_id)
    assert (done.outcome, done.reason_code, done.output_commit) == (
        "succeeded",
        "completed",
        "f" * 40,
    )
    assert len(await stack.wait_events(pb.RunAccepted, run_id)) == 1
    assert len(await stack.wait_events(pb.RunStarted, run_id)) == 1


async def test_reconciled_service_apply_observe_then_cancel_terminates(make_stack):
    def service(cmd, double):
        if cmd.kind == "apply":
            return result(cmd, phase="queued")
        if cmd.kind == "terminate":
            return result(cmd)
        if cmd.kind == "observe":
            if double.count(cmd.attempt_id, "terminate"):
                return result(cmd, phase="cancelled", native_state="Deleted")
            return result(
                cmd, phase="running", native_state="Available", endpoint="https://svc.demo.example/"
            )
        return None

    stack = await make_stack(script=service)
    stack.portfolio.add(
        revision("w-svc", 1, family="reconciled-service", spec={"command": ["serve"]})
    )
    run_id = await stack.launch("w-svc", 1)
    run = await stack.wait_for(run_id, lambda r: r.phase == "running" and r.endpoint)
    assert (
        run.family == "reconciled-service"
        and run.site_id == "lab-k8s"
        and run.service_kind == "application"
    )
    reply = await stack.cancel(run_id)
    assert reply.cancel_recorded and reply.desired_state == "cancel"
    run = await stack.terminal(run_id)
    assert (run.outcome, run.reason_code, run.cancelled_by) == (
        "cancelled",
        "cancelled-by-member",
        "m-alice",
    )
    kinds = [k for _, k in stack.site.kinds(run_id)]
    assert kinds[0] == "apply" and kinds.count("terminate") == 1 and kinds[-1] == "observe"
    assert kinds.index("terminate") < len(kinds) - 1  # observed after the terminate result
    stack.site.assert_no_duplicates()


async def test_retry_after_definite_failure_is_a_new_attempt(make_stack):
    def fail_first(cmd, double):
        if cmd.kind == "observe" and cmd.attempt_number == 1:
            return result(
                cmd,
                phase="failed",
                failure={"stage": "compute", "code": "exit-nonzero", "exit_code": 2},
            )
        return happy_batch(cmd, double)

    stack = await make_stack(script=fail_first)
    stack.portfolio.add(
        revision(
            "w-retry", 1, spec={"command": ["x"], "retry": {"maxAttempts": 2, "backoffSeconds": 0}}
        )
    )
    run_id = await stack.launch("w-retry", 1)
    run = await stack.terminal(run_id)
    assert run.outcome == "succeeded" and run.max_attempts == 2
    assert run.reason_message == ""  # nothing refused: nothing to explain
    assert [(a.number, a.state, a.reason_code) for a in run.attempts] == [
        (1, "failed", "exit-nonzero"),
        (2, "succeeded", "completed"),
    ]
    assert (
        run.attempts[0].exit.exit_code == 2
        and run.attempts[0].material_digest == run.attempts[1].material_digest
    )
    assert [n for n, k in stack.site.kinds(run_id) if k == "prepare"] == [1, 2]
    stack.site.assert_no_duplicates()


async def test_retries_exhausted_end_failed_with_the_last_reason(make_stack):
    def always_refuse_start(cmd, double):
        if cmd.kind == "start":
            return result(cmd, "refused", "slurm-error-2014")
        return happy_batch(cmd, double)

    stack = await make_stack(script=always_refuse_start)
    stack.portfolio.add(revision("w-r", 1, spec={"command": ["x"], "retry": {"maxAttempts": 2}}))
    run_id = await stack.launch("w-r", 1)
    run = await stack.terminal(run_id)
    assert (run.outcome, run.reason_code) == ("failed", "slurm-error-2014")
    assert [a.state for a in run.attempts] == ["refused", "refused"]
    (done,) = await stack.wait_events(pb.RunCompleted, run_id)
    assert done.outcome == "failed" and done.attempts == 2


async def test_a_refused_prepare_explains_itself_in_get_run(make_stack):
    """GetRun's reason_message carries the Site's words (a new user saw only
    ``invalid-material``); a Run that succeeded has none."""

    def refuse_prepare(cmd, double):
        if cmd.kind == "prepare":
            return result(cmd, "refused", "invalid-material",
                          message="the repository URL is not usable: file:// is not https")
        return happy_batch(cmd, double)

    stack = await make_stack(script=refuse_prepare)
    run = await stack.terminal(await stack.launch())
    assert (run.outcome, run.reason_code) == ("failed", "invalid-material")
    assert run.reason_message == "the repository URL is not usable: file:// is not https"


async def test_a_site_cancellation_explains_itself_in_get_run(make_stack):
    """A stage job cancelled at the Site (an administrator's scancel) ends the Run
    ``cancelled-at-site`` with words for it and the Attempt's scheduler state filled."""
    failure = {"stage": "compute", "scheduler_state": "CANCELLED", "job_id": "job-1",
               "exit_code": None, "signal": None, "code": "cancelled-at-site"}

    def cancelled_at_site(cmd, double):
        if cmd.kind == "observe":
            return result(cmd, phase="cancelled", native_state="CANCELLED", failure=failure)
        return happy_batch(cmd, double)

    stack = await make_stack(script=cancelled_at_site)
    run = await stack.terminal(await stack.launch())
    assert (run.outcome, run.reason_code) == ("cancelled", "cancelled-at-site")
    assert run.reason_message.startswith("its compute job was cancelled at the Site "
                                         "(scheduler state CANCELLED), not by a member")
    (attempt,) = run.attempts
    assert (attempt.exit.scheduler_state, attempt.exit.failure_stage) == ("CANCELLED", "compute")


async def test_planning_rejections_end_the_run_with_stable_codes(make_stack):
    stack = await make_stack()
    missing = await stack.launch("w-missing", 7)
    run = await stack.terminal(missing)
    assert (run.outcome, run.reason_code, len(run.attempts)) == (
        "failed",
        "workload-revision-not-found",
        0,
    )
    stack.portfolio.add(
        revision("w-gpu", 1, spec={"command": ["x"], "resources": {"gpus": 1, "gpuClass": "h100"}})
    )
    gpu = await stack.terminal(await stack.launch("w-gpu", 1))
    assert gpu.reason_code == "gpu-class-unavailable"
    assert "h100" in gpu.reason_message  # planning's own words
    (done,) = await stack.wait_events(pb.RunCompleted, missing)
    assert done.reason_code == "workload-revision-not-found"
    assert stack.site.received == []


async def test_dispatch_deadline_ends_an_unconfirmed_start(make_stack):
    def never_confirm_start(cmd, double):
        if cmd.kind == "start":
            return None  # the start stays uncertain
        if cmd.kind == "observe":
            return result(cmd, phase="cancelled", native_state="CANCELLED")
        return happy_batch(cmd, double)

    stack = await make_stack(
        settings=dataclasses.replace(FAST, dispatch_timeout_seconds=4), script=never_confirm_start
    )
    run_id = await stack.launch()
    run = await stack.terminal(run_id)
    assert (run.outcome, run.reason_code) == ("failed", "dispatch-deadline-passed")
    kinds = [k for _, k in stack.site.kinds(run_id)]
    assert kinds == ["prepare", "start", "cancel", "observe"]  # the start is never repeated
    assert run.attempts[0].attempt_id == stack.site.received[-1].attempt_id  # same Attempt identity


async def test_due_runs_wake_the_workers_without_waiting_for_their_poll(make_stack):
    """Launch → planned → prepare → start moves on NOTIFY wake-ups alone (migration
    0004): both workers poll only once a minute here, yet the Run starts at once."""
    stack = await make_stack(
        settings=dataclasses.replace(FAST, launch_poll_seconds=60.0, supervisor_poll_seconds=60.0)
    )
    await asyncio.sleep(0.5)  # both workers have had their first (empty) pass and now idle
    run_id = await stack.launch()
    (started,) = await stack.wait_events(pb.RunStarted, run_id, timeout=20.0)
    assert started.attempt_number == 1
    kinds = [k for _, k in stack.site.kinds(run_id)]
    assert kinds[:2] == ["prepare", "start"]


async def test_a_run_that_ends_wakes_the_oldest_launch_waiting_for_a_slot(make_stack):
    """Project limit 1: the second launch waits (``concurrent-run-limit``) with a 60 s
    retry delay, yet is planned as soon as the first Run ends (migration 0005)."""
    stack = await make_stack(
        settings=dataclasses.replace(FAST, planning_retry_seconds=60.0, observe_interval_seconds=1.0)
    )
    stack.governance.write_text(
        stack.governance.read_text().replace("concurrent_run_limit: 10", "concurrent_run_limit: 1")
    )
    first = await stack.launch()
    await stack.wait_events(pb.RunStarted, first, timeout=20.0)
    second = await stack.launch()
    for _ in range(400):  # the launch worker records why the launch waits
        async with stack.engine.connect() as conn:
            row = (await conn.execute(
                text("SELECT phase, planning_wait_code FROM runs WHERE run_id = :r"), {"r": second}
            )).one()
        if row.planning_wait_code:
            break
        await asyncio.sleep(0.05)
    assert tuple(row) == ("accepted", "concurrent-run-limit")
    ended = await stack.terminal(first)
    assert ended.outcome == "succeeded"
    (started,) = await stack.wait_events(pb.RunStarted, second, timeout=20.0)  # ≪ the 60 s retry
    assert started.attempt_number == 1



async def test_a_run_cancelled_while_waiting_for_a_slot_is_not_explained_by_the_wait(make_stack):
    """A new user read "cancelled (cancelled-before-start: the Project's concurrent-Run
    limit is reached)" — as if the limit had cancelled it."""
    stack = await make_stack(settings=dataclasses.replace(FAST, planning_retry_seconds=60.0))
    stack.governance.write_text(
        stack.governance.read_text().replace("concurrent_run_limit: 10", "concurrent_run_limit: 1")
    )
    first = await stack.launch()
    await stack.wait_events(pb.RunStarted, first, timeout=20.0)
    second = await stack.launch()
    for _ in range(400):
        run = await stack.get(second)
        if run.reason_message:
            break
        await asyncio.sleep(0.05)
    assert "limit" in run.reason_message  # while it waits, planning's words say why
    await stack.cancel(second)
    cancelled = await stack.terminal(second)
    assert (cancelled.outcome, cancelled.reason_code) == ("cancelled", "cancelled-before-start")
    assert cancelled.reason_message == ""
    await stack.cancel(first)
