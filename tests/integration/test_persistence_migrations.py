"""Replicas migrate their database at start, all at once: concurrent upgrades of one
database to head (separate processes, as replicas are) all succeed and leave it at
head once."""

from __future__ import annotations

import asyncio
import sys

import pytest
from sqlalchemy import text

from execution_core.__main__ import MIGRATIONS
from metallo.persistence.engine import create_engine
from tests.integration.test_service_ops_endpoints import ROOT

pytestmark = pytest.mark.integration

MIGRATE = ("import asyncio, sys; from metallo.persistence.migrations import migrate; "
           "asyncio.run(migrate(sys.argv[1], sys.argv[2], check_autovacuum=False))")


async def test_concurrent_upgrades_of_a_fresh_database_all_succeed(make_database):
    url = await make_database("execution_core")  # created, not migrated
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-c", MIGRATE, url, str(MIGRATIONS), cwd=str(ROOT),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE) for _ in range(3)]
    outcomes = [(await p.wait(), (await p.stderr.read()).decode()[-2000:]) for p in procs]
    assert [o for o in outcomes if o[0] != 0] == []
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            versions = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
            runs = (await conn.execute(text("SELECT count(*) FROM runs"))).scalar_one()
    finally:
        await engine.dispose()
    assert len(versions) == 1 and runs == 0
