"""The local executor tells the Site edge when an Attempt's native work ends (ADR 0016):
once per Attempt, only after the terminal state is committed to ``jobs.sqlite`` (so
the observe the notice brings sees it), in the background, never slowing or
breaking supervision or the command stream. Real worker, real HTTPS edge, real git,
real stage processes, real SQLite; the notice itself goes to a recording callback."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from site_runtime.application.delivery import EdgeRefused
from site_runtime.application.ports import SiteCommand
from tests.integration.site_runtime_support import (
    Runtime,
    batch_payload,
    new_runtime,
    observe_until,
    seed_repository,
    stage_rows,
)


def committed_state(state: Path, attempt_id: str) -> str | None:
    """The Attempt's state as committed to jobs.sqlite, read through a connection of
    its own (what any other reader, e.g. the next observe, would see)."""
    conn = sqlite3.connect(state / "jobs.sqlite")
    try:
        row = conn.execute(
            "SELECT state FROM attempts WHERE attempt_id = ?", (attempt_id,)
        ).fetchone()
    finally:
        conn.close()
    return row[0] if row else None


class Recorder:
    """The native-end callback: records, at the moment of each call, the committed
    journal state and what an observe answers then; ``then`` (call number → awaitable)
    lets a call raise or hang afterwards."""

    def __init__(self, then=None) -> None:
        self.runtime: Runtime | None = None
        self.calls: list[tuple[str, str | None, str]] = []
        self.then = then
        self.cancelled = 0

    async def __call__(self, attempt_id: str) -> bool:
        assert self.runtime is not None
        committed = committed_state(self.runtime.state, attempt_id)
        observed = await self.runtime.executor.observe(
            SiteCommand(
                sequence=0,
                command_id=f"probe-{uuid.uuid4().hex}",
                kind="observe",
                site_id="lab-slurm",
                environment="slurm",
                run_id="run-1",
                attempt_id=attempt_id,
                attempt_number=1,
            )
        )
        self.calls.append((attempt_id, committed, observed.observation["phase"]))
        if self.then is not None:
            try:
                await self.then(len(self.calls))
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return True

    async def wait_for(self, count: int, timeout: float = 30.0) -> None:
        for _ in range(int(timeout / 0.05)):
            if len(self.calls) >= count:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{count} notices expected, got {self.calls}")


async def recording_runtime(edge, tmp_path, recorder: Recorder, **kwargs: Any) -> Runtime:
    runtime = await new_runtime(edge, tmp_path, on_native_end=recorder, **kwargs)
    recorder.runtime = runtime
    return runtime


async def run_attempt(
    edge, runtime: Runtime, url: str, commit: str, command: Any, attempt_id: str = "att-1"
) -> None:
    """Prepare and start ``attempt_id`` running ``command``."""
    seq = await edge.append(
        "prepare", payload=batch_payload(url, commit, command), attempt_id=attempt_id
    )
    assert (await runtime.handle(seq))["outcome"] == "succeeded"
    started = await runtime.handle(await edge.append("start", attempt_id=attempt_id))
    assert started["outcome"] == "succeeded", started


async def test_a_successful_attempt_is_noticed_once_after_its_end_is_committed(edge, tmp_path):
    recorder = Recorder()
    runtime = await recording_runtime(edge, tmp_path, recorder)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        await run_attempt(edge, runtime, url, commit, {"argv": ["true"]})
        done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["phase"] == "succeeded", done
        await recorder.wait_for(1)
        # At the moment of the call the end was committed, and an observe reported it.
        assert recorder.calls == [("att-1", "succeeded", "succeeded")]
        # More observes and supervision passes send nothing more.
        await observe_until(runtime, edge, "att-1", {"succeeded"})
        for _ in range(5):
            await runtime.executor.tick()
        await asyncio.sleep(0.2)
        assert len(recorder.calls) == 1
        assert runtime.executor.native_ends.in_flight == 0
    finally:
        await runtime.close()


async def test_a_failing_command_is_noticed_once(edge, tmp_path):
    recorder = Recorder()
    runtime = await recording_runtime(edge, tmp_path, recorder)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        await run_attempt(edge, runtime, url, commit, {"argv": ["false"]})
        done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["failure"]["code"] == "compute-failed"
        await recorder.wait_for(1)
        await observe_until(runtime, edge, "att-1", {"failed"})
        await asyncio.sleep(0.2)
        assert recorder.calls == [("att-1", "failed", "failed")]
    finally:
        await runtime.close()


async def test_a_cancelled_attempt_is_noticed_once(edge, tmp_path):
    recorder = Recorder()
    runtime = await recording_runtime(edge, tmp_path, recorder)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        await run_attempt(edge, runtime, url, commit, {"shell": "sleep 60"})
        await observe_until(runtime, edge, "att-1", {"running"})
        cancelled = await runtime.handle(
            await edge.append("cancel", payload={"reason": "member-request"})
        )
        assert cancelled["observation"]["phase"] == "cancelled"
        await recorder.wait_for(1)
        await asyncio.sleep(0.2)
        assert recorder.calls == [("att-1", "cancelled", "cancelled")]
    finally:
        await runtime.close()


async def test_a_waiting_start_failed_by_its_deadline_is_noticed(edge, tmp_path):
    recorder = Recorder()
    runtime = await recording_runtime(edge, tmp_path, recorder, max_active=0)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        payload = batch_payload(url, commit, ["true"])
        deadline = datetime.now(UTC) + timedelta(seconds=2)
        payload["deadline"] = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert (await runtime.handle(await edge.append("prepare", payload=payload)))[
            "outcome"
        ] == "succeeded"
        started = await runtime.handle(await edge.append("start"))
        assert started["observation"]["phase"] == "queued"  # waiting for a slot
        await asyncio.sleep(max(0.0, (deadline - datetime.now(UTC)).total_seconds()) + 1.1)
        await runtime.executor.tick()  # the supervision pass fails it
        await recorder.wait_for(1)
        assert recorder.calls == [("att-1", "failed", "failed")]
        assert stage_rows(runtime.state, "att-1")["stage-in"]["code"] == ("attempt-deadline-passed")
    finally:
        await runtime.close()


async def _second_attempt_under_supervision(
    edge, runtime: Runtime, recorder: Recorder, url: str, commit: str
) -> None:
    """With the supervision loop running, att-2 ends and is noticed without an observe."""
    await runtime.executor.start_supervision()
    await run_attempt(edge, runtime, url, commit, {"argv": ["true"]}, attempt_id="att-2")
    await recorder.wait_for(2)
    assert recorder.calls[1] == ("att-2", "succeeded", "succeeded")
    assert committed_state(runtime.state, "att-2") == "succeeded"


async def test_a_callback_that_raises_changes_nothing(edge, tmp_path):
    async def raise_first(call: int) -> None:
        if call == 1:
            raise RuntimeError("the edge is on fire")

    recorder = Recorder(then=raise_first)
    runtime = await recording_runtime(edge, tmp_path, recorder)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        await run_attempt(edge, runtime, url, commit, {"argv": ["true"]})
        done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["phase"] == "succeeded", done
        await recorder.wait_for(1)
        await _second_attempt_under_supervision(edge, runtime, recorder, url, commit)
        assert [c[0] for c in recorder.calls] == ["att-1", "att-2"]  # no second try of att-1
    finally:
        await runtime.close()


async def test_a_callback_that_hangs_is_cut_off_by_the_timeout(edge, tmp_path):
    async def hang_first(call: int) -> None:
        if call == 1:
            await asyncio.sleep(3600)

    recorder = Recorder(then=hang_first)
    runtime = await recording_runtime(edge, tmp_path, recorder, notice_timeout_seconds=1.0)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        await run_attempt(edge, runtime, url, commit, {"argv": ["true"]})
        loop = asyncio.get_running_loop()
        began = loop.time()
        done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["phase"] == "succeeded", done
        await recorder.wait_for(1)
        # The command stream did not wait for the hanging notice.
        assert runtime.executor.native_ends.in_flight == 1
        for _ in range(60):
            if runtime.executor.native_ends.in_flight == 0:
                break
            await asyncio.sleep(0.05)
        assert runtime.executor.native_ends.in_flight == 0 and recorder.cancelled == 1
        assert loop.time() - began < 30
        await _second_attempt_under_supervision(edge, runtime, recorder, url, commit)
    finally:
        await runtime.close()


async def test_stopping_cancels_a_notice_in_flight(edge, tmp_path):
    async def hang(call: int) -> None:
        await asyncio.sleep(3600)

    recorder = Recorder(then=hang)
    runtime = await recording_runtime(edge, tmp_path, recorder)
    closed = False
    try:
        url, commit = await seed_repository(edge, tmp_path)
        await run_attempt(edge, runtime, url, commit, {"argv": ["true"]})
        await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
        await recorder.wait_for(1)
        assert runtime.executor.native_ends.in_flight == 1
        await asyncio.wait_for(runtime.close(), 10)
        closed = True
        assert runtime.executor.native_ends.in_flight == 0 and recorder.cancelled == 1
    finally:
        if not closed:
            await runtime.close()


@pytest.mark.parametrize("command", [{"argv": ["true"]}, {"argv": ["false"]}])
async def test_without_a_callback_nothing_breaks(edge, tmp_path, command):
    runtime = await new_runtime(edge, tmp_path)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        await runtime.executor.start_supervision()
        await run_attempt(edge, runtime, url, commit, command)
        done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
        expected = "succeeded" if command["argv"] == ["true"] else "failed"
        assert done["observation"]["phase"] == expected
        assert runtime.executor.native_ends.in_flight == 0
        assert not runtime.executor.native_ends.noticed("att-1")
    finally:
        await runtime.close()


async def test_the_edge_client_notices_the_end_at_the_real_edge(edge, tmp_path):
    """Wired as ``python -m site_runtime`` does: the notice reaches the Site edge's
    ``POST /v1/attempts/{attempt_id}/native-end`` (a repeat answers ``noticed: false``)."""
    answers: list[bool] = []
    runtime = await new_runtime(edge, tmp_path)

    async def notice(attempt_id: str) -> bool:
        answers.append(await runtime.client.notice_native_end(attempt_id))
        return answers[-1]

    runtime.executor.native_ends.send = notice
    try:
        url, commit = await seed_repository(edge, tmp_path)
        await run_attempt(edge, runtime, url, commit, {"argv": ["true"]})
        await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
        for _ in range(200):
            if answers:
                break
            await asyncio.sleep(0.05)
        assert answers == [True]
        assert await runtime.client.notice_native_end("att-1") is False
        with pytest.raises(EdgeRefused) as refused:
            await runtime.client.notice_native_end("att-unknown")
        assert (refused.value.status, refused.value.code) == (404, "attempt-not-in-stream")
    finally:
        await runtime.close()
