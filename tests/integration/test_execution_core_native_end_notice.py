"""A Site's native end notice makes the next observe due at once (ADR 0016): a
finished Run ends within moments instead of at its observe back-off, and the Run's
state still comes only from an observe's result."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
from sqlalchemy import select

from execution_core.adaptors.metrics import run_metrics
from execution_core.adaptors.tables import attempts
from tests.integration.execution_core_support import FAST, result, stack_factory

pytestmark = pytest.mark.integration

# Without a notice the first observe comes 20 s after the start result.
SLOW_OBSERVE = replace(FAST, first_observe_seconds=20.0, observe_interval_seconds=60.0)


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


def ended_at_the_site(cmd, double):
    if cmd.kind == "prepare":
        return result(cmd, phase="prepared")
    if cmd.kind == "start":
        return result(cmd, phase="running", native_state="RUNNING")
    if cmd.kind == "observe":
        return result(cmd, phase="succeeded", native_state="COMPLETED", exit_code=0)
    return result(cmd)


async def test_a_notice_ends_a_finished_run_at_once_through_one_observe(make_stack):
    stack = await make_stack(settings=SLOW_OBSERVE, script=ended_at_the_site)
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: r.phase == "running")
    (start,) = [c for c in stack.site.received if c.run_id == run_id and c.kind == "start"]
    await asyncio.sleep(0.5)
    assert stack.site.count(start.attempt_id, "observe") == 0  # the back-off holds

    began = time.monotonic()
    first = await stack.site.notice_native_end(start)
    again = await stack.site.notice_native_end(start)  # a repeat changes nothing
    await stack.consumed([first, again])
    run = await stack.terminal(run_id, timeout=10)
    assert time.monotonic() - began < 10  # not the 20 s back-off
    assert (run.outcome, run.native_state) == ("succeeded", "COMPLETED")
    assert stack.site.count(start.attempt_id, "observe") == 1  # the evidence: one observe
    noticed_at, after_seq = await _notice_columns(stack, start.attempt_id)
    assert noticed_at is not None and after_seq > 0  # after the start command
    stack.site.assert_no_duplicates()
    # metallo_run_native_end_to_completed_seconds observes this Run (one, in < 10 s).
    families = {m.name: m for m in await run_metrics(stack.engine)()}
    samples = {s.name: s for s in families["metallo_run_native_end_to_completed_seconds"].samples
               if s.name.endswith(("_count", "_sum")) or s.labels.get("le") == "10.0"}
    assert samples["metallo_run_native_end_to_completed_seconds_count"].value == 1
    assert samples["metallo_run_native_end_to_completed_seconds_bucket"].value == 1
    assert 0 <= samples["metallo_run_native_end_to_completed_seconds_sum"].value < 10


async def test_a_notice_for_an_unknown_or_ended_attempt_changes_nothing(make_stack):
    stack = await make_stack(settings=SLOW_OBSERVE, script=ended_at_the_site)
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: r.phase == "running")
    (start,) = [c for c in stack.site.received if c.run_id == run_id and c.kind == "start"]
    stranger = type(start)()
    stranger.CopyFrom(start)
    stranger.attempt_id = "00000000-0000-4000-8000-000000000000"
    await stack.consumed([await stack.site.notice_native_end(stranger)])
    await asyncio.sleep(0.5)
    assert stack.site.count(start.attempt_id, "observe") == 0
    assert (await stack.get(run_id)).phase == "running"
    assert await _notice_columns(stack, start.attempt_id) == (None, None)

    await stack.consumed([await stack.site.notice_native_end(start)])
    await stack.terminal(run_id, timeout=10)
    # A notice after the end: the Attempt is not touched and nothing more is sent.
    noticed = await _notice_columns(stack, start.attempt_id)
    sent = len(stack.site.received)
    await stack.consumed([await stack.site.notice_native_end(start)])
    await asyncio.sleep(0.5)
    assert len(stack.site.received) == sent
    assert await _notice_columns(stack, start.attempt_id) == noticed


async def test_a_notice_for_an_attempt_that_ended_before_it_changes_nothing(make_stack):
    def refused_start(cmd, double):
        if cmd.kind == "prepare":
            return result(cmd, phase="prepared")
        return result(cmd, outcome="refused", code="authorisation-refused")

    stack = await make_stack(settings=SLOW_OBSERVE, script=refused_start)
    run_id = await stack.launch()
    await stack.terminal(run_id)
    (start,) = [c for c in stack.site.received if c.run_id == run_id and c.kind == "start"]
    sent = len(stack.site.received)
    await stack.consumed([await stack.site.notice_native_end(start)])
    await asyncio.sleep(0.5)
    assert len(stack.site.received) == sent
    assert await _notice_columns(stack, start.attempt_id) == (None, None)


async def _notice_columns(stack, attempt_id: str):
    async with stack.engine.connect() as conn:
        row = (
            await conn.execute(
                select(
                    attempts.c.native_end_noticed_at, attempts.c.native_end_noticed_after_seq
                ).where(attempts.c.attempt_id == attempt_id)
            )
        ).one()
    return tuple(row)
