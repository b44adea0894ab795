"""Audit records are append-only in every service that keeps them: the migration's
trigger refuses a raw UPDATE, DELETE and TRUNCATE (docs/operators.md, Audit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from metallo.audit import AuditEntry, append
from metallo.persistence.engine import create_engine, session_factory

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("execution_core", "site_coordination", "pipeline_coordination")


@pytest.mark.parametrize("service", SERVICES)
async def test_a_raw_update_delete_or_truncate_of_an_audit_record_raises(make_database, service):
    url = await make_database(service, ROOT / "services" / service / "migrations")
    engine = create_engine(url, pool_size=2)
    try:
        async with session_factory(engine).begin() as session:
            await append(session, AuditEntry(actor="m-alice", principal="guest", project="demo",
                                             action="run.launch", decision="accepted",
                                             request_id="c-1", affected={"run_id": "r-1"}))
        for statement in ("UPDATE audit_records SET decision = 'refused'",
                          "UPDATE audit_records SET actor = 'm-mallory' WHERE seq = 1",
                          "DELETE FROM audit_records",
                          "TRUNCATE audit_records"):
            with pytest.raises(DBAPIError) as refused:
                async with engine.begin() as conn:
                    await conn.execute(text(statement))
            assert "audit records are append-only" in str(refused.value), statement
            assert refused.value.orig.sqlstate == "42501"
        async with engine.connect() as conn:
            row = (await conn.execute(text("SELECT actor, decision FROM audit_records"))).one()
        assert tuple(row) == ("m-alice", "accepted")  # unchanged, still there
    finally:
        await engine.dispose()
