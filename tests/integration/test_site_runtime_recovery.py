"""Recovery of the Site Runtime (seed 004 §4C; seed 000, Recovery): the Runtime is
stopped in process at exact fault points of each journal step, then restarted: saved
results are replayed, uncertain commands recovered, no phase is rerun and no duplicate
process is started. Real Site edge (TLS, PostgreSQL), real git. A real ``python -m
site_runtime`` process killed with SIGKILL: test_site_runtime_recovery_sigkill.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import select

from site_coordination.adaptors.tables import site_commands
from tests.integration.site_runtime_support import (
    Crash,
    batch_payload,
    edge_result,
    group_gone,
    new_runtime,
    observe_until,
    released_grants,
    seed_repository,
    stage_rows,
)

ROOT = Path(__file__).resolve().parents[2]


def crash_at(step: str, kind: str | None = None, runtime_ref: list | None = None):
    """A fault hook that raises Crash the first time ``step`` is reached (for ``kind``)."""
    fired = []

    def fault(name: str) -> None:
        if name != step or fired:
            return
        if kind is not None and runtime_ref:
            entries = runtime_ref[0].delivery.unfinished()
            if not entries or entries[-1].command.kind != kind:
                return
        fired.append(name)
        raise Crash(name)

    return fault


async def crashed_runtime(edge, tmp_path, step: str, kind: str):
    ref: list = []
    rt = await new_runtime(edge, tmp_path, fault=crash_at(step, kind, ref))
    ref.append(rt)
    return rt


def runner_starts(state: Path, stage: str) -> int:
    log = state / "workspaces" / "att-1" / "logs" / f"{stage}.log"
    return log.read_text().count(f"{stage} started") if log.exists() else 0


async def _prepared(edge, tmp_path, command=None):
    url, commit = await seed_repository(edge, tmp_path)
    payload = batch_payload(url, commit, command or {"argv": ["python3", "make_output.py"]})
    return await edge.append("prepare", payload=payload)


async def test_kill_after_journaling_before_acting(edge, tmp_path):
    seq = await _prepared(edge, tmp_path)
    a = await crashed_runtime(edge, tmp_path, "journaled", "prepare")
    with pytest.raises(Crash):
        await a.handle(seq)
    assert a.delivery.entry(seq).state == "journaled"
    assert a.jobs.attempt("att-1") is None  # nothing was done before the kill
    await a.close()
    b = await new_runtime(edge, tmp_path)
    try:
        result = await b.handle(seq)
        assert result["outcome"] == "succeeded"
        assert await edge_result(edge, seq) == result
    finally:
        await b.close()


async def test_kill_after_start_acted_before_its_result_was_saved(edge, tmp_path):
    seq = await _prepared(edge, tmp_path)
    a = await crashed_runtime(edge, tmp_path, "executed", "start")
    await a.handle(seq)
    start_seq = await edge.append("start")
    with pytest.raises(Crash):
        await a.handle(start_seq)
    entry = a.delivery.entry(start_seq)
    assert entry.state == "dispatched" and entry.result_json is None
    await a.close()

    b = await new_runtime(edge, tmp_path)
    try:
        started = await b.handle(start_seq)  # executor.recover: no second stage-in
        assert started["outcome"] == "succeeded"
        done = await observe_until(b, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["phase"] == "succeeded"
        rows = stage_rows(b.state, "att-1")
        assert {s: r["launches"] for s, r in rows.items()} == {
            "stage-in": 1,
            "compute": 1,
            "stage-out": 1,
        }
        assert runner_starts(b.state, "stage-in") == 1
        assert runner_starts(b.state, "compute") == 1
    finally:
        await b.close()


@pytest.mark.parametrize("step", ["result-saved", "reported"])
async def test_saved_result_is_replayed_after_a_kill(edge, tmp_path, step):
    seq = await _prepared(edge, tmp_path)
    a = await crashed_runtime(edge, tmp_path, step, "start")
    await a.handle(seq)
    start_seq = await edge.append("start")
    with pytest.raises(Crash):
        await a.handle(start_seq)
    saved = a.delivery.entry(start_seq).result_json
    assert saved is not None
    await a.close()

    b = await new_runtime(edge, tmp_path)
    try:
        replayed = await b.handle(start_seq)
        assert replayed == json.loads(saved)  # the exact saved result, not a new one
        assert await edge_result(edge, start_seq) == replayed
        assert stage_rows(b.state, "att-1")["stage-in"]["launches"] == 1
        done = await observe_until(b, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["phase"] == "succeeded"
        assert runner_starts(b.state, "stage-in") == 1
    finally:
        await b.close()


async def test_cancel_interrupted_after_acting_answers_accepted_after_restart(edge, tmp_path):
    seq = await _prepared(edge, tmp_path, {"argv": ["sleep", "60"]})
    a = await crashed_runtime(edge, tmp_path, "executed", "cancel")
    await a.handle(seq)
    await a.handle(await edge.append("start"))
    await observe_until(a, edge, "att-1", {"running"})
    cancel_seq = await edge.append("cancel", payload={"reason": "member-request"})
    with pytest.raises(Crash):
        await a.handle(cancel_seq)
    await a.close()
    b = await new_runtime(edge, tmp_path)
    try:
        cancelled = await b.handle(cancel_seq)
        assert cancelled["message"] == "accepted"
        assert cancelled["observation"]["phase"] == "cancelled"
    finally:
        await b.close()


async def test_stage_gone_without_recorded_exit_is_marked_lost(edge, tmp_path):
    seq = await _prepared(edge, tmp_path, {"argv": ["sleep", "60"]})
    a = await new_runtime(edge, tmp_path)
    await a.handle(seq)
    await a.handle(await edge.append("start"))
    await observe_until(a, edge, "att-1", {"running"})
    await a.close()
    control = a.state / "workspaces" / "att-1" / "control" / "compute"
    for _ in range(100):
        if (control / "child").exists():
            break
        await asyncio.sleep(0.05)
    runner = int((control / "claim").read_text().split()[0])
    child = int((control / "child").read_text())
    os.killpg(child, signal.SIGKILL)  # the host "reboots": runner and job die unrecorded
    os.kill(runner, signal.SIGKILL)
    assert await group_gone(child) and await group_gone(runner)

    b = await new_runtime(edge, tmp_path)
    try:
        done = await observe_until(b, edge, "att-1", {"failed", "succeeded"})
        failure = done["observation"]["failure"]
        assert failure["stage"] == "compute" and failure["code"] == "local-process-lost"
    finally:
        await b.close()


class _CrashAfterIssue:
    """Repository grants that stop the Runtime right after the edge issued a grant,
    before any stage process exists (the grant id is already journaled)."""

    def __init__(self, real) -> None:
        self.real = real

    async def issue(self, attempt_id: str, direction: str):
        grant = await self.real.issue(attempt_id, direction)
        self.issued = grant.grant_id
        return _Raising(grant)

    async def authorise_execution(self, request):
        return await self.real.authorise_execution(request)

    async def authorise_with_grant(self, request, direction: str):
        # The start's stage-in grant comes with its authorisation (one round trip).
        material, grant = await self.real.authorise_with_grant(request, direction)
        self.issued = grant.grant_id
        return material, _Raising(grant)

    async def release(self, grant_id: str) -> None:
        await self.real.release(grant_id)


class _Raising:
    def __init__(self, grant) -> None:
        self.grant_id = grant.grant_id

    @property
    def username(self):
        raise Crash("issued")


async def test_kill_between_grant_and_process_relaunches_once_and_revokes_the_first_grant(
    edge, tmp_path
):
    seq = await _prepared(edge, tmp_path)
    a = await new_runtime(edge, tmp_path)
    await a.handle(seq)
    crashing = _CrashAfterIssue(a.client)
    a.executor.grants = crashing
    a.executor.authority = crashing
    start_seq = await edge.append("start")
    with pytest.raises(Crash):
        await a.handle(start_seq)
    row = stage_rows(a.state, "att-1")["stage-in"]
    assert (row["state"], row["launches"], row["grant_id"]) == ("launching", 0, crashing.issued)
    await a.close()

    b = await new_runtime(edge, tmp_path)
    try:
        assert (await b.handle(start_seq))["outcome"] == "succeeded"
        done = await observe_until(b, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["phase"] == "succeeded"
        rows = stage_rows(b.state, "att-1")
        assert rows["stage-in"]["launches"] == 1 and rows["stage-in"]["grant_id"] != crashing.issued
        assert runner_starts(b.state, "stage-in") == 1
        grants = await released_grants(edge)
        assert len(grants) == 3  # the lost stage-in grant, the new one, stage-out
        assert all(g.revoked_at is not None for g in grants)
    finally:
        await b.close()


async def _delivery(edge, sequence: int):
    async with edge.engine.connect() as conn:
        return (
            await conn.execute(
                select(
                    site_commands.c.first_delivered_at,
                    site_commands.c.delivery_count,
                    site_commands.c.result_json,
                ).where(site_commands.c.sequence == sequence)
            )
        ).one()


async def test_the_next_command_comes_with_the_result_answer(edge, tmp_path):
    seq = await _prepared(edge, tmp_path)
    start_seq = await edge.append("start")
    rt = await new_runtime(edge, tmp_path)
    try:
        await rt.handle(seq)
        # Handed out with prepare's answer: delivered once, not journaled before acting.
        handed = await _delivery(edge, start_seq)
        assert handed.delivery_count == 1 and handed.result_json is None
        assert rt.delivery.entry(start_seq) is None
        started = await rt.handle(start_seq)
        assert started["outcome"] == "succeeded"
        assert (await _delivery(edge, start_seq)).delivery_count == 1  # no GET for it
        assert await edge_result(edge, start_seq) == started
    finally:
        await rt.close()


async def test_restart_between_the_result_and_journaling_the_handed_next_loses_nothing(
    edge, tmp_path
):
    seq = await _prepared(edge, tmp_path)
    start_seq = await edge.append("start")
    a = await new_runtime(edge, tmp_path, fault=crash_at("next-handed"))
    with pytest.raises(Crash):
        await a.handle(seq)
    assert a.delivery.entry(seq).state == "acknowledged"
    assert a.delivery.entry(start_seq) is None  # handed out at the edge, never journaled
    handed = await _delivery(edge, start_seq)
    assert handed.first_delivered_at is not None and handed.result_json is None
    await a.close()

    b = await new_runtime(edge, tmp_path)
    try:
        started = await b.handle(start_seq)  # pulled again: the edge still has no result
        assert started["outcome"] == "succeeded"
        assert await edge_result(edge, start_seq) == started
        again = await _delivery(edge, start_seq)
        assert again.delivery_count == 2
        done = await observe_until(b, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["phase"] == "succeeded"
        assert stage_rows(b.state, "att-1")["stage-in"]["launches"] == 1
        assert runner_starts(b.state, "stage-in") == 1
    finally:
        await b.close()
