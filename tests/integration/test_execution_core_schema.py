"""The hand-kept Alembic revisions build exactly the tables the code declares."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from execution_core.adaptors.tables import metadata
from metallo.persistence.engine import create_engine
from tests.integration.execution_core_support import MIGRATIONS

pytestmark = pytest.mark.integration


async def test_migrations_match_the_declared_tables(make_database):
    url = await make_database("execution_core", MIGRATIONS)
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(MigrationContext.configure(c), metadata)
            )
    finally:
        await engine.dispose()
    assert diff == []
