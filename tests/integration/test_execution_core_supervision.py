"""Reliable supervision: killed supervisors, racing supervisors, fencing, duplicate results
(seed 004 §3D, §4E)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import pytest
from sqlalchemy import func, select, update

from execution_core.adaptors.tables import runs, site_commands
from execution_core.application.faults import WorkerCrash
from execution_core.application.launch_worker import LaunchWorker
from execution_core.application.supervisor import RunSupervisor
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.persistence.leases import LeaseLost
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from tests.integration.execution_core_support import FAST, happy_batch, result, stack_factory

pytestmark = pytest.mark.integration


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


POINTS = (
    "supervisor:claimed",
    "supervisor:decided",
    "supervisor:before-commit",
    "supervisor:committed",
)
SHORT_LEASE = replace(FAST, supervisor_lease_seconds=0.3, launch_lease_seconds=0.3)


def crash_at(point: str, every_other: bool = False):
    """A fault hook dying at ``point`` — always, or on every other arrival there."""
    arrivals = [0]

    async def hook(where: str) -> None:
        if where == point:
            arrivals[0] += 1
            if not every_other or arrivals[0] % 2 == 1:
                raise WorkerCrash(point)

    return hook


@pytest.mark.parametrize("point", POINTS)
async def test_supervisor_killed_at_every_step_resumes_without_duplicates(make_stack, point):
    """Every step's first supervisor dies at ``point``; a fresh supervisor picks up each time."""
    stack = await make_stack(
        settings=SHORT_LEASE, parts=frozenset({"server", "consumer", "relay", "launch"})
    )
    run_id = await stack.launch()
    crashes = 0
    hook = crash_at(point, every_other=True)
    deadline = asyncio.get_running_loop().time() + 90
    while asyncio.get_running_loop().time() < deadline:
        run = await stack.get(run_id)
        if run.phase == "terminal":
            break
        supervisor = RunSupervisor(
            stack.core.sessions, stack.core.store, stack.core.outbox, SHORT_LEASE, fault=hook
        )
        try:
            await supervisor.run_once()
        except WorkerCrash:
            crashes += 1
        await asyncio.sleep(0.05)
    run = await stack.terminal(run_id, timeout=5)
    assert run.outcome == "succeeded" and crashes > 0
    assert [k for _, k in stack.site.kinds(run_id)] == ["prepare", "start", "observe", "observe"]
    stack.site.assert_no_duplicates()
    assert len(await stack.wait_events(pb.RunCompleted, run_id)) == 1


async def test_launch_worker_killed_mid_planning_resumes(make_stack):
    stack = await make_stack(
        settings=SHORT_LEASE, parts=frozenset({"server", "consumer", "relay", "supervisor"})
    )
    await stack.core.client.start()
    try:
        run_id = await stack.launch()
        for point in ("launch:claimed", "launch:revision-read", "launch:before-commit"):
            worker = LaunchWorker(
                stack.core.sessions,
                stack.core.store,
                stack.core.authority,
                stack.core.launch_worker.revisions,
                stack.core.outbox,
                SHORT_LEASE,
                fault=crash_at(point),
            )
            with contextlib.suppress(WorkerCrash):
                await worker.run_once()
            assert (await stack.get(run_id)).phase == "accepted"
            await asyncio.sleep(0.35)  # the dead worker's lease expires
        healthy = LaunchWorker(
            stack.core.sessions,
            stack.core.store,
            stack.core.authority,
            stack.core.launch_worker.revisions,
            stack.core.outbox,
            SHORT_LEASE,
        )
        assert await healthy.run_once() == 1
        run = await stack.terminal(run_id)
        assert run.outcome == "succeeded" and len(run.attempts) == 1
    finally:
        await stack.core.client.close()


async def test_two_supervisors_racing_never_both_act(make_stack):
    racing = replace(FAST, supervisor_poll_seconds=0.01, batch=3)
    stack = await make_stack(settings=racing)  # supervisor #1 runs inside the stack
    others = [
        RunSupervisor(stack.core.sessions, stack.core.store, stack.core.outbox, racing)
        for _ in range(2)
    ]
    for s in others:
        await s.start()
    try:
        ids = [await stack.launch() for _ in range(6)]
        for run_id in ids:
            assert (await stack.terminal(run_id)).outcome == "succeeded"
    finally:
        for s in others:
            await s.stop()
    stack.site.assert_no_duplicates()
    for run_id in ids:
        assert [k for _, k in stack.site.kinds(run_id)] == [
            "prepare",
            "start",
            "observe",
            "observe",
        ]


async def test_stale_supervisor_write_is_fenced(make_stack):
    stack = await make_stack(parts=frozenset({"server", "consumer", "relay", "launch"}))
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: len(r.attempts) == 1)
    store, sessions = stack.core.store, stack.core.sessions
    a = RunSupervisor(sessions, store, stack.core.outbox, FAST, owner="a")
    b = RunSupervisor(sessions, store, stack.core.outbox, FAST, owner="b")
    async with sessions() as session, session.begin():
        (claim_a,) = await store.claim_for_supervision(session, a.owner, 0.2, 1)
    await asyncio.sleep(0.3)  # a's lease expires on PostgreSQL's clock
    async with sessions() as session, session.begin():
        (claim_b,) = await store.claim_for_supervision(session, b.owner, 5, 1)
    assert claim_b.generation == claim_a.generation + 1
    with pytest.raises(LeaseLost):
        await a.step(claim_a)
    await b.step(claim_b)
    async with stack.engine.connect() as conn:
        n = (
            await conn.execute(
                select(func.count())
                .select_from(site_commands)
                .where(site_commands.c.run_id == run_id)
            )
        ).scalar()
    assert n == 1  # one prepare, by b only


async def test_duplicate_and_conflicting_results_are_applied_once(make_stack):
    def hold_observe(cmd, double):
        if cmd.kind == "observe":
            return None
        if cmd.kind == "prepare":
            return result(cmd, phase="prepared")
        return result(cmd, phase="queued")

    stack = await make_stack(script=hold_observe)
    run_id = await stack.launch()
    while not any(c.kind == "observe" for c in stack.site.held.values()):
        await asyncio.sleep(0.05)
    (cmd,) = [c for c in stack.site.held.values() if c.kind == "observe"]
    cid = cmd.metadata.command_id
    first = result(cmd, phase="running", native_state="RUNNING")
    ids = [
        await stack.site.resolve(cid, first),
        await stack.site.resolve(cid, first),  # redelivered with a new message id
        await stack.site.resolve(
            cid, result(cmd, phase="failed", native_state="FAILED")
        ),  # conflicting
    ]
    await stack.consumed(ids)  # all three were applied (or ignored) by Execution Core
    await stack.wait_for(run_id, lambda r: r.phase == "running")
    run = await stack.get(run_id)
    assert run.phase == "running" and run.outcome == ""  # the first recorded result stands
    async with stack.engine.connect() as conn:
        stored = (
            await conn.execute(
                select(site_commands.c.result).where(site_commands.c.command_id == cid)
            )
        ).scalar()
    assert stored["observation"]["phase"] == "running"
    assert (await stack.cancel(run_id)).cancel_recorded  # leave nothing running


async def test_temporary_planning_failure_keeps_a_durable_retry_time(make_stack):
    stack = await make_stack()
    text = stack.governance.read_text().replace(
        "ready: true", "ready: false", 1
    )  # lab-slurm not ready
    stack.governance.write_text(text)
    run_id = await stack.launch()
    for _ in range(600):  # until the launch worker has tried once
        async with stack.engine.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.run_id == run_id))).one()
        if row.planning_tries:
            break
        await asyncio.sleep(0.05)
    assert (
        row.phase == "accepted"
        and row.planning_wait_code == "site-not-ready"
        and row.planning_tries >= 1
    )
    assert row.next_wake_at is not None
    stack.governance.write_text(text.replace("ready: false", "ready: true", 1))
    assert (await stack.terminal(run_id)).outcome == "succeeded"


async def test_unknown_and_poisoned_results_do_not_block(make_stack):
    def hold_first_observe(cmd, double):
        if cmd.kind == "observe" and double.count(cmd.attempt_id, "observe") == 1:
            return None
        return happy_batch(cmd, double)

    stack = await make_stack(script=hold_first_observe)
    run_id = await stack.launch()
    while not stack.site.held:
        await asyncio.sleep(0.05)
    (cmd,) = stack.site.held.values()
    stranger = sc.AppendSiteCommand(
        metadata={"command_id": "not-ours"}, site_id="lab-slurm", kind="observe"
    )
    async with stack.site.sessions() as session, session.begin():
        await stack.site._publish_result(session, stranger, result(stranger, phase="failed"))
        poisoned = sc.SiteCommandResultRecorded(
            command_id=cmd.metadata.command_id, result_json="{not json"
        )
        await stack.site.outbox.publish_event(session, poisoned, aggregate_id="stream:lab-slurm")
    await stack.site.resolve(cmd.metadata.command_id, result(cmd, phase="running"))
    run = await stack.terminal(run_id)
    assert run.outcome == "succeeded"  # neither the stranger nor the poison stopped the queue
    async with stack.engine.begin() as conn:  # waking a finished Run never moves it
        await conn.execute(
            update(runs).where(runs.c.run_id == run_id).values(next_wake_at=func.now())
        )
    await asyncio.sleep(0.3)
    assert (await stack.get(run_id)).outcome == "succeeded"
