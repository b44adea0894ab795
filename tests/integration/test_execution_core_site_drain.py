"""Draining a Site (operator ``DrainSite``/``ResumeSite``) on real PostgreSQL and
RabbitMQ: no new Attempts go to it, with the visible waiting reason
``site-draining``; accepted work there goes on, is observed and can be
cancelled; resuming plans the waiting Runs at once."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected
from tests.integration.execution_core_support import (
    FAST,
    cmd_meta,
    query_meta,
    result,
    stack_factory,
)

pytestmark = pytest.mark.integration
OPERATOR = "m-operator"


def runs_until_cancelled(cmd, double):
    """prepare ✓, start ✓, observe running until a cancel was sent, then cancelled."""
    if cmd.kind == "prepare":
        return result(cmd, phase="prepared")
    if cmd.kind == "start":
        return result(cmd, phase="queued", native_state="PENDING")
    if cmd.kind == "cancel":
        return result(cmd)
    if cmd.kind == "observe":
        if double.count(cmd.attempt_id, "cancel"):
            return result(cmd, phase="cancelled", native_state="CANCELLED")
        return result(cmd, phase="running", native_state="RUNNING")
    return None


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


async def _request(stack, message):
    return await stack.client.request(message, timeout=15)


async def test_a_draining_site_gets_no_new_attempts_and_its_work_goes_on(make_stack):
    # Planning retries only every minute here: a Run planned soon after the resume
    # proves the resume woke it.
    stack = await make_stack(settings=dataclasses.replace(FAST, planning_retry_seconds=60.0),
                             script=runs_until_cancelled)
    running = await stack.launch()
    run = await stack.wait_for(running, lambda r: r.phase == "running")
    attempt_id = run.attempts[0].attempt_id

    drained = await _request(stack, pb.DrainSite(metadata=cmd_meta(OPERATOR, ""),
                                                 site_id="lab-slurm", reason="kernel upgrade"))
    assert not drained.already_draining
    assert (drained.drain.site_id, drained.drain.drained_by, drained.drain.reason,
            drained.drain.active_runs) == ("lab-slurm", OPERATOR, "kernel upgrade", 1)
    again = await _request(stack, pb.DrainSite(metadata=cmd_meta(OPERATOR, ""),
                                               site_id="lab-slurm"))
    assert again.already_draining and again.drain.reason == "kernel upgrade"

    waiting = await stack.launch()
    held = await stack.wait_for(waiting, lambda r: r.waiting_reason == "site-draining")
    assert held.phase == "accepted" and not held.attempts and "lab-slurm" in held.reason_message
    listed = await _request(stack, pb.ListSiteDrains(metadata=query_meta(OPERATOR, "")))
    assert [(d.site_id, d.active_runs) for d in listed.drains] == [("lab-slurm", 1)]

    # Accepted work on the draining Site is still observed and can be cancelled.
    seen = stack.site.count(attempt_id, "observe")
    for _ in range(200):
        if stack.site.count(attempt_id, "observe") > seen:
            break
        await asyncio.sleep(0.05)
    assert stack.site.count(attempt_id, "observe") > seen
    assert (await stack.cancel(running)).cancel_recorded
    assert (await stack.terminal(running)).outcome == "cancelled"

    resumed = await _request(stack, pb.ResumeSite(metadata=cmd_meta(OPERATOR, ""),
                                                  site_id="lab-slurm"))
    assert resumed.was_draining and resumed.runs_woken == 1
    planned = await stack.wait_for(waiting, lambda r: r.phase != "accepted", timeout=20)
    assert planned.site_id == "lab-slurm" and planned.waiting_reason != "site-draining"
    assert not (await _request(stack, pb.ListSiteDrains(metadata=query_meta(OPERATOR, "")))).drains
    not_again = await _request(stack, pb.ResumeSite(metadata=cmd_meta(OPERATOR, ""),
                                                    site_id="lab-slurm"))
    assert not not_again.was_draining and not_again.runs_woken == 0
    await stack.cancel(waiting)
    assert (await stack.terminal(waiting)).outcome == "cancelled"


async def test_operator_requests_need_the_operator_capability(make_stack):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    with pytest.raises(Rejected) as denied:
        await _request(stack, pb.DrainSite(metadata=cmd_meta("m-alice"), site_id="lab-slurm"))
    assert denied.value.code == "permission-denied"
    assert denied.value.details["capability"] == "sites.drain"
    with pytest.raises(Rejected) as unknown:
        await _request(stack, pb.DrainSite(metadata=cmd_meta(OPERATOR, ""), site_id="nosuch"))
    assert unknown.value.code == "site-not-found"
    with pytest.raises(Rejected) as bad:
        await _request(stack, pb.DrainSite(metadata=cmd_meta(OPERATOR, ""), site_id="Bad Id"))
    assert bad.value.code == "invalid-argument"
    with pytest.raises(Rejected) as no_read:
        await _request(stack, pb.CountActiveRuns(metadata=query_meta("m-alice")))
    assert no_read.value.code == "permission-denied"
    assert not (await _request(stack, pb.ListSiteDrains(metadata=query_meta(OPERATOR, "")))).drains

    # The capability is read afresh: removing it refuses the very next request.
    stack.governance.write_text(stack.governance.read_text().replace(
        "m-operator: [sites.grants, sites.drain, platform.read]", "m-operator: [platform.read]"))
    with pytest.raises(Rejected) as removed:
        await _request(stack, pb.DrainSite(metadata=cmd_meta(OPERATOR, ""), site_id="lab-slurm"))
    assert removed.value.code == "permission-denied"


async def test_active_runs_are_counted_for_an_operator(make_stack):
    stack = await make_stack(script=runs_until_cancelled)
    assert (await _request(stack, pb.CountActiveRuns(metadata=query_meta(OPERATOR, "")))).active == 0
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: r.phase == "running")
    assert (await _request(stack, pb.CountActiveRuns(metadata=query_meta(OPERATOR, "")))).active == 1
    await stack.cancel(run_id)
    await stack.terminal(run_id)
    assert (await _request(stack, pb.CountActiveRuns(metadata=query_meta(OPERATOR, "")))).active == 0
