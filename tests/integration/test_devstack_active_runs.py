"""`metallo dev down` says how many Runs are still active before it stops the stack
(a new user's Run failed when its stage-out found the lab Git server gone)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from metallo.devstack.control import warn_active_runs
from metallo.persistence.engine import create_engine
from tests.integration.execution_core_support import MIGRATIONS

pytestmark = pytest.mark.integration


async def _insert_runs(url: str, phases: list[str]) -> None:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.begin() as conn:
            for n, phase in enumerate(phases):
                await conn.execute(text(
                    "INSERT INTO runs (run_id, project, workload_id, revision, initiating_member,"
                    " launch_command_id, phase, next_wake_at)"
                    " VALUES (:r, 'demo', 'w', 1, 'm', :c, :p, now() + interval '1 hour')"),
                    {"r": f"r{n}", "c": f"c{n}", "p": phase})
    finally:
        await engine.dispose()


async def test_active_runs_are_counted_and_said(make_database, monkeypatch):
    url = await make_database("execution_core", MIGRATIONS)
    monkeypatch.setenv("METALLO_EXECUTION_CORE_DATABASE_URL", url)
    await _insert_runs(url, ["terminal", "running", "accepted", "terminal"])
    said: list[str] = []
    # warn_active_runs runs its own event loop (the CLI is synchronous): a thread here.
    assert await asyncio.to_thread(warn_active_runs, said.append) == 2
    assert said and said[0].startswith("warning: 2 Run(s) still active")


async def test_nothing_is_said_when_none_is_active_or_the_database_is_away(
    make_database, monkeypatch
):
    url = await make_database("execution_core", MIGRATIONS)
    monkeypatch.setenv("METALLO_EXECUTION_CORE_DATABASE_URL", url)
    await _insert_runs(url, ["terminal"])
    said: list[str] = []
    assert await asyncio.to_thread(warn_active_runs, said.append) == 0 and said == []
    monkeypatch.setenv("METALLO_EXECUTION_CORE_DATABASE_URL",
                       "postgresql+asyncpg://postgres@127.0.0.1:1/nothing")
    assert await asyncio.to_thread(warn_active_runs, said.append) == 0 and said == []
