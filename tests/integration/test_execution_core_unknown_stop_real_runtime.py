"""A cancellation answered by a Runtime that does not know the Attempt is not done
(docs/runs.md, Lost Attempts): Execution Core, the real Site Coordination and real
Site Runtimes (local executor). Runtime A starts the Run's Attempt and stops;
Runtime B — the same Site, another state directory, as after a Runtime is moved or
its executor switched — takes the stream and is asked to cancel. B must not close
the cancellation (it cannot vouch that A's work stopped): the Run stays cancelling,
waiting with ``attempt-unknown-at-site``. When A takes the stream again, the
cancellation sent again reaches it, A stops the process, and the Run ends
``cancelled`` — never ``succeeded`` with the member's cancel swallowed."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from tests.integration.execution_core_support import FAST, revision, stack_factory
from tests.integration.site_coordination_support import start_harness
from tests.integration.site_runtime_support import group_gone, new_runtime, seed_repository
from tests.integration.test_execution_core_lost_attempt_real_runtime import (
    RunningRuntime,
    SiteCoordination,
    _spec,
)

pytestmark = pytest.mark.integration

# A reconciliation period long enough to move the stream back to Runtime A first.
UNKNOWN_FAST = dataclasses.replace(
    FAST, first_observe_seconds=0.1, lost_after_seconds=120.0, lost_observe_max_seconds=0.4
)


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


async def test_a_cancel_answered_by_a_runtime_not_knowing_the_attempt_is_sent_again(
    make_stack, make_database, amqp_url, topology, namespace, tmp_path
):
    edge = await start_harness(make_database, tmp_path / "edge", namespace)
    running = None
    try:
        url, commit = await seed_repository(edge, tmp_path)
        stack = await make_stack(
            settings=UNKNOWN_FAST, site=SiteCoordination(edge, amqp_url, topology)
        )
        rev = revision("w-long", 1, spec=_spec(["sleep", "300"]))
        rev.repository_url, rev.commit = url, commit
        stack.portfolio.add(rev)

        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        runtime_a = await new_runtime(edge, tmp_path / "a")
        running = RunningRuntime(runtime_a)
        await running.start()
        run_id = await stack.launch("w-long", 1)
        run = await stack.wait_for(run_id, lambda r: r.phase == "running", timeout=60)
        attempt_id = run.attempts[0].attempt_id
        compute = runtime_a.jobs.stage(attempt_id, "compute")
        assert compute is not None and compute.pid
        await running.stop()  # A's journal and its process stay

        running = RunningRuntime(await new_runtime(edge, tmp_path / "b"))
        await running.start()
        await stack.cancel(run_id)
        waiting = await stack.wait_for(
            run_id, lambda r: r.waiting_reason == "attempt-unknown-at-site", timeout=30
        )
        assert waiting.phase == "cancelling", waiting
        assert waiting.observation_confidence == "uncertain", waiting
        await asyncio.sleep(1.5)  # several refused cancels; still not closed
        assert (await stack.get(run_id)).phase == "cancelling"
        assert not await group_gone(compute.pid, timeout=0.2)  # A's work still runs
        await running.stop()

        running = RunningRuntime(await new_runtime(edge, tmp_path / "a"))
        await running.start()
        ended = await stack.terminal(run_id, timeout=60)
        assert (ended.outcome, ended.reason_code) == ("cancelled", "cancelled-by-member"), ended
        assert [a.state for a in ended.attempts] == ["cancelled"]
        assert await group_gone(compute.pid)
    finally:
        if running is not None:
            await running.stop()
        await edge.stop()
        await edge.engine.dispose()
