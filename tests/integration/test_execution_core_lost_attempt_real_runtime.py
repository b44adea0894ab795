"""A lost Attempt end to end with a real Site Runtime whose state is removed (ADR 0018;
docs/runs.md, Lost Attempts): Execution Core, the real Site Coordination (command
server over RabbitMQ, outbox relay, Site edge over TLS on PostgreSQL) and a real Site
Runtime (worker, journals, HTTPS edge client, local executor). The Runtime is stopped
with an observe outstanding, its state directory removed and a fresh Runtime started
on it: the Site no longer knows the Attempt, which ends ``lost`` within the (shortened)
reconciliation period, and its Project slot goes to the next Run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal

import pytest
from sqlalchemy import and_, select

from metallo.messaging import OutboxRelay
from site_coordination.adaptors.command_handlers import build_command_server
from site_coordination.adaptors.tables import site_commands
from tests.integration.execution_core_support import FAST, revision, stack_factory
from tests.integration.site_coordination_support import start_harness
from tests.integration.site_runtime_support import group_gone, new_runtime, seed_repository

pytestmark = pytest.mark.integration

LOST_FAST = dataclasses.replace(
    FAST, first_observe_seconds=0.1, lost_after_seconds=3.0, lost_observe_max_seconds=0.4
)


class SiteCoordination:
    """The real Site Coordination on the bus: its command server and outbox relay over
    the edge harness's database."""

    def __init__(self, edge, amqp_url, topology) -> None:
        self.server = build_command_server(edge.engine, amqp_url, topology)
        self.relay = OutboxRelay(
            edge.engine, amqp_url, topology, owner="site_coordination", poll_seconds=0.05
        )

    async def start(self) -> None:
        await self.relay.start()
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
        await self.relay.stop()


class RunningRuntime:
    """A Site Runtime run as in production: the worker's loop and the executor's
    supervision in the background."""

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.stop_event = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.runtime.executor.start_supervision()
        self.task = asyncio.create_task(self.runtime.worker.run(self.stop_event))

    async def stop(self) -> None:
        self.stop_event.set()
        if self.task is not None:
            await self.task
        await self.runtime.close()


def _spec(argv: list[str]) -> dict:
    return {
        "command": {"argv": argv},
        "preCommands": [],
        "resources": {"cpus": 1, "memoryMiB": 256, "gpus": 0, "wallTimeSeconds": 600, "nodes": 1},
        "runtime": {"environment": {}, "workingDirectory": "."},
        "inputs": [],
    }


async def _pending_observes(edge, attempt_id: str) -> int:
    async with edge.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(site_commands.c.sequence).where(
                    and_(
                        site_commands.c.attempt_id == attempt_id,
                        site_commands.c.kind == "observe",
                        site_commands.c.result_json.is_(None),
                    )
                )
            )
        ).all()
    return len(rows)


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


async def test_an_attempt_whose_runtime_state_is_removed_ends_lost_and_frees_its_slot(
    make_stack, make_database, amqp_url, topology, namespace, tmp_path
):
    edge = await start_harness(make_database, tmp_path / "edge", namespace)
    running = None
    try:
        url, commit = await seed_repository(edge, tmp_path)
        stack = await make_stack(
            settings=LOST_FAST, site=SiteCoordination(edge, amqp_url, topology)
        )
        gov = stack.governance.read_text()
        stack.governance.write_text(
            gov.replace("concurrent_run_limit: 10", "concurrent_run_limit: 1")
        )
        for workload, argv in (("w-long", ["sleep", "300"]), ("w-next", ["true"])):
            rev = revision(workload, 1, spec=_spec(argv))
            rev.repository_url, rev.commit = url, commit
            stack.portfolio.add(rev)

        runtime = await new_runtime(edge, tmp_path)
        running = RunningRuntime(runtime)
        await running.start()
        lost_id = await stack.launch("w-long", 1)
        run = await stack.wait_for(lost_id, lambda r: r.phase == "running", timeout=60)
        attempt_id = run.attempts[0].attempt_id
        next_id = await stack.launch("w-next", 1)  # waits for the only slot

        compute = runtime.jobs.stage(attempt_id, "compute")
        assert compute is not None and compute.pid

        # Stop the Runtime; Execution Core's next observe stays outstanding at the edge.
        await running.stop()
        running = None
        for _ in range(200):
            if await _pending_observes(edge, attempt_id):
                break
            await asyncio.sleep(0.1)
        assert await _pending_observes(edge, attempt_id) == 1
        # Its state is removed: the journals, the workspace, and its stage process.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(compute.pid, signal.SIGKILL)
        assert await group_gone(compute.pid)
        shutil.rmtree(runtime.state)
        assert (await stack.get(next_id)).phase in ("accepted", "planning")

        running = RunningRuntime(await new_runtime(edge, tmp_path))
        await running.start()
        waiting = await stack.wait_for(
            lost_id, lambda r: r.waiting_reason == "attempt-unknown-at-site", timeout=20
        )
        assert waiting.phase != "terminal"
        lost = await stack.terminal(lost_id, timeout=30)
        assert (lost.outcome, lost.reason_code) == ("lost", "lost-at-site")
        assert [(a.state, a.reason_code) for a in lost.attempts] == [("lost", "lost-at-site")]
        # The freed slot admits the next Run, which runs on the restarted Runtime.
        done = await stack.terminal(next_id, timeout=90)
        assert done.outcome == "succeeded", done
    finally:
        if running is not None:
            await running.stop()
        await edge.stop()
        await edge.engine.dispose()
