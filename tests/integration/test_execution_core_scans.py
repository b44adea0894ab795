"""Execution Core's polling queries stay off full scans of ``runs`` however many
Runs have ended (ADR 0011): asyncpg prepares each statement and PostgreSQL may plan
it once for any parameter values, so the phase constants must reach it as literals
or the partial index ``runs_due`` cannot serve them."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker

from execution_core.adaptors.run_store import SqlRunStore
from metallo.persistence.engine import create_engine
from tests.integration.execution_core_support import MIGRATIONS

pytestmark = pytest.mark.integration

ENDED, ACTIVE = 20_000, 12


async def _seq_scans_of_runs(session) -> int:
    """Sequential scans of ``runs`` in this transaction so far."""
    return (
        await session.execute(
            text("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'runs'")
        )
    ).scalar_one()


async def test_claims_and_admission_counts_use_the_partial_index_with_generic_plans(make_database):
    engine = create_engine(await make_database("execution_core", MIGRATIONS), pool_size=1)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO runs (run_id, project, workload_id, revision, initiating_member,"
                    " launch_command_id, site_id, phase, next_wake_at)"
                    " SELECT 'r-' || n, 'demo', 'w', 1, 'm-alice', 'c-' || n, 'lab-slurm',"
                    " CASE WHEN n <= :active THEN 'dispatching' ELSE 'terminal' END,"
                    " now() - interval '1 minute'"
                    " FROM generate_series(1, :total) AS n"
                ),
                {"active": ACTIVE, "total": ENDED + ACTIVE},
            )
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("ANALYZE runs"))
        store = SqlRunStore()
        sessions = async_sessionmaker(engine, expire_on_commit=False)
        async with sessions() as session, session.begin():
            # What a prepared statement gets after its first few runs: one plan for all values.
            await session.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
            before = await _seq_scans_of_runs(session)
            claims = await store.claim_for_supervision(session, "test", 30, 100)
            in_project, per_site = await store.count_active(session, "demo")
            after = await _seq_scans_of_runs(session)
            await session.rollback()
    finally:
        await engine.dispose()
    assert len(claims) == ACTIVE and in_project == ACTIVE and per_site == {"lab-slurm": ACTIVE}
    assert after - before == 0  # with bind parameters: 4 scans of all 20,012 Runs
