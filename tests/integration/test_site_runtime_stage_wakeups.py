"""Stage wake-ups (ADR 0012): a stage runner that has written its status wakes the
local executor's supervision, so an Attempt does not wait a poll per stage."""

from __future__ import annotations

import asyncio
import os
import socket

from site_runtime.adaptors.local.stage_runner import notify_runtime
from site_runtime.adaptors.local.stage_wakeups import MAX_SOCKET_PATH_BYTES, StageWakeups
from tests.integration.site_runtime_support import batch_payload, new_runtime, seed_repository


async def test_a_runner_datagram_wakes_the_listener_and_nothing_else_does(tmp_path):
    wakeups = StageWakeups(tmp_path / "wake.sock")
    try:
        assert wakeups.path == str(tmp_path / "wake.sock")
        assert oct(os.stat(wakeups.path).st_mode & 0o777) == "0o600"
        assert await wakeups.wait(0.05) is False  # no datagram: the poll timeout
        assert notify_runtime(wakeups.path) is True
        assert await wakeups.wait(5.0) is True
        assert await wakeups.wait(0.05) is False  # cleared once read
        for _ in range(50):  # a burst is one pass, not fifty
            notify_runtime(wakeups.path)
        assert await wakeups.wait(5.0) is True
        await asyncio.sleep(0)
        assert await wakeups.wait(0.05) is False
    finally:
        wakeups.close()
    assert not (tmp_path / "wake.sock").exists()
    assert notify_runtime(str(tmp_path / "wake.sock")) is False  # nobody listens: no error
    assert notify_runtime(None) is False


async def test_a_stale_socket_file_is_replaced_and_a_too_long_path_turns_wakeups_off(tmp_path):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(tmp_path / "wake.sock"))
    stale.close()  # as a killed Runtime leaves it
    wakeups = StageWakeups(tmp_path / "wake.sock")
    try:
        assert notify_runtime(wakeups.path)
        assert await wakeups.wait(5.0)
    finally:
        wakeups.close()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "wake.sock").write_text("data")  # not a socket: never removed
    kept = StageWakeups(tmp_path / "other" / "wake.sock")
    assert kept.path is None and (tmp_path / "other" / "wake.sock").read_text() == "data"
    kept.close()
    deep = tmp_path / ("d" * (MAX_SOCKET_PATH_BYTES - len(str(tmp_path))))
    off = StageWakeups(deep / "wake.sock")
    assert off.path is None
    assert await off.wait(0.01) is False
    off.close()


async def test_stages_follow_each_other_without_waiting_for_the_poll(edge, tmp_path):
    """Poll every 120 s: only the runners' wake-ups can carry the Attempt through its
    three stages within the 30 s this test waits."""
    runtime = await new_runtime(edge, tmp_path, poll_seconds=120.0)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        payload = batch_payload(url, commit, {"argv": ["true"]})
        assert (await runtime.handle(await edge.append("prepare", payload=payload)))[
            "outcome"
        ] == "succeeded"
        await runtime.executor.start_supervision()
        await asyncio.sleep(0.2)  # its first pass, with nothing active yet, is done
        started = await runtime.handle(await edge.append("start"))
        assert started["outcome"] == "succeeded"
        for _ in range(300):
            row = runtime.jobs.attempt("att-1")
            if row is not None and row.state in ("succeeded", "failed", "cancelled"):
                break
            await asyncio.sleep(0.1)
        assert row is not None and row.state == "succeeded", row
        stages = runtime.jobs.stages("att-1")
        assert [(s.stage, s.state) for s in stages] == [
            ("stage-in", "succeeded"),
            ("compute", "succeeded"),
            ("stage-out", "succeeded"),
        ]
    finally:
        await runtime.close()


async def test_a_waiting_start_goes_on_with_the_pass_that_frees_a_slot(edge, tmp_path):
    """max_active 1: the second start is answered at once (the Attempt waits), and the
    supervision pass that the first Attempt's runner wakes at its end launches it —
    not the 20 s poll."""
    runtime = await new_runtime(edge, tmp_path, poll_seconds=20.0, max_active=1)
    try:
        url, commit = await seed_repository(edge, tmp_path)
        for attempt in ("att-1", "att-2"):
            payload = batch_payload(url, commit, {"argv": ["true"]})
            seq = await edge.append("prepare", payload=payload, attempt_id=attempt)
            assert (await runtime.handle(seq))["outcome"] == "succeeded"
        await runtime.executor.start_supervision()
        assert (await runtime.handle(await edge.append("start", attempt_id="att-1")))[
            "outcome"
        ] == "succeeded"
        seq = await edge.append("start", attempt_id="att-2")
        await asyncio.wait_for(runtime.worker.step(), 30.0)  # one step: no deferral
        entry = runtime.delivery.entry(seq)
        assert entry is not None and entry.state == "acknowledged", entry
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15.0  # well inside the 20 s poll
        while runtime.jobs.attempt("att-2").state != "succeeded":
            assert loop.time() < deadline, runtime.jobs.attempt("att-2").state
            await asyncio.sleep(0.1)
        assert runtime.jobs.attempt("att-1").state == "succeeded"
    finally:
        await runtime.close()


async def test_an_older_listener_never_removes_a_newer_ones_socket(tmp_path):
    """A restart where the new Runtime binds before the old one closes."""
    old = StageWakeups(tmp_path / "wake.sock")
    new = StageWakeups(tmp_path / "wake.sock")
    try:
        old.close()
        assert (tmp_path / "wake.sock").exists()
        assert notify_runtime(new.path) and await new.wait(5.0)
    finally:
        new.close()
    assert not (tmp_path / "wake.sock").exists()


async def test_supervision_restarts_keep_one_socket_and_floods_are_rate_limited(tmp_path):
    """Stop/start keeps the one listener; a process flooding wake.sock (anything running
    as the Runtime's user can) gets at most one pass per MIN_PASS_SECONDS."""
    from site_runtime.adaptors.local.executor import (
        MIN_PASS_SECONDS,
        LocalExecutor,
        LocalSettings,
    )
    from site_runtime.adaptors.local.jobs import LocalJobsJournal

    jobs = LocalJobsJournal(tmp_path / "jobs.sqlite")
    executor = LocalExecutor(
        LocalSettings(workspace_root=tmp_path / "ws", poll_seconds=5.0),
        jobs,
        authority=None,
        grants=None,
    )
    passes = 0
    real_tick = executor.tick

    async def counting_tick() -> None:
        nonlocal passes
        passes += 1
        await real_tick()

    executor.tick = counting_tick  # type: ignore[method-assign]
    try:
        for _ in range(3):
            await executor.start_supervision()
            first = executor._wakeups
            await executor.stop_supervision()
        await executor.start_supervision()
        assert executor._wakeups is first  # one listener across restarts
        await asyncio.sleep(0.1)
        flooding = 1.0
        before = passes
        loop = asyncio.get_running_loop()
        end = loop.time() + flooding
        sent = tries = 0
        while loop.time() < end:
            sent += notify_runtime(first.path)  # False when the socket's queue is full
            tries += 1
            if tries % 20 == 0:
                await asyncio.sleep(0)  # let the loop read and pass
        await asyncio.sleep(0.1)
        done = passes - before
        assert sent > 200
        assert 1 <= done <= (flooding + 0.1) / MIN_PASS_SECONDS + 2, (done, sent)
    finally:
        await executor.stop_supervision()
        executor.close()
        jobs.close()
    assert not (tmp_path / "ws" / "wake.sock").exists()
