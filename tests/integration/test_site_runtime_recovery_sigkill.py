"""Recovery of the Site Runtime (seed 004 §4C; seed 000, Recovery) as a real process: a
``python -m site_runtime`` killed with SIGKILL during compute is restarted and re-adopts
the running process — compute is not run twice and no duplicate process is started.
Real Site edge (TLS, PostgreSQL), real git.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.integration.site_runtime_support import (
    bare_git,
    bare_head,
    edge_result,
    live_group_members,
    stage_rows,
)
from tests.integration.test_site_runtime_recovery import _prepared

ROOT = Path(__file__).resolve().parents[2]


def _runtime_process(edge, tmp_path: Path, grant_file: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'libs'}:{ROOT / 'services'}",
        "RUNTIME_LOCAL_GRACE_SECONDS": "1",
    }
    log = open(tmp_path / "runtime.log", "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "site_runtime",
            "--edge",
            edge.url,
            "--ca",
            str(edge.ca_file),
            "--grant-file",
            str(grant_file),
            "--executor",
            "local",
            "--state-dir",
            str(tmp_path / "state"),
            "--wait",
            "1",
        ],
        env=env,
        stdout=log,
        stderr=log,
    )


async def _wait_for(predicate, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.1)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not reached")


def _compute_state(state: Path) -> str | None:
    path = state / "jobs.sqlite"
    if not path.exists():
        return None
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            "SELECT state FROM stages WHERE attempt_id = 'att-1' AND stage = 'compute'"
        ).fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()
    return row[0] if row else None


async def test_runtime_killed_during_compute_readopts_the_running_process(edge, tmp_path):
    # Compute outlives the Runtime: it appends one line per run, so a rerun would show.
    command = {"shell": "sleep 3; echo ran >> runs.txt"}
    seq = await _prepared(edge, tmp_path, command)
    grant_file = tmp_path / "grant"
    grant_file.write_text(await edge.grant())
    first = _runtime_process(edge, tmp_path, grant_file)
    try:
        await edge.append("start")
        control = tmp_path / "state" / "workspaces" / "att-1" / "control" / "compute"
        await _wait_for(
            lambda: _compute_state(tmp_path / "state") == "running" and (control / "child").exists()
        )
        first.send_signal(signal.SIGKILL)
        await asyncio.get_running_loop().run_in_executor(None, first.wait)
        runner = int((control / "claim").read_text().split()[0])
        assert live_group_members(runner), "compute must survive the Runtime's death"
    finally:
        if first.poll() is None:
            first.kill()
    second = _runtime_process(edge, tmp_path, grant_file)
    try:
        phase = None
        for _ in range(60):
            obs_seq = await edge.append("observe")
            for _ in range(100):
                result = await edge_result(edge, obs_seq)
                if result is not None:
                    break
                await asyncio.sleep(0.1)
            assert result is not None, (tmp_path / "runtime.log").read_text()[-2000:]
            phase = result["observation"]["phase"]
            if phase in ("succeeded", "failed"):
                break
            await asyncio.sleep(0.3)
        assert phase == "succeeded", result
        assert result["observation"]["output_commit"] == bare_head(edge)
        rows = stage_rows(tmp_path / "state", "att-1")
        assert {s: r["launches"] for s, r in rows.items()} == {
            "stage-in": 1,
            "compute": 1,
            "stage-out": 1,
        }
        assert bare_git(edge, "show", "main:runs.txt") == "ran\n"  # compute ran exactly once
        assert await edge_result(edge, seq) is not None
        # Graceful stop on SIGTERM.
        second.send_signal(signal.SIGTERM)
        code = await asyncio.get_running_loop().run_in_executor(None, second.wait, 30)
        assert code == 0
        assert "Site Runtime stopped" in (tmp_path / "runtime.log").read_text()
    finally:
        if second.poll() is None:
            second.kill()
