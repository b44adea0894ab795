"""Reading a service database's audit records and command receipts in tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


async def audit_rows(engine: AsyncEngine, **where: str) -> list[dict[str, Any]]:
    """Every ``audit_records`` row (oldest first) whose columns equal ``where``."""
    clause = " AND ".join(f"{k} = :{k}" for k in where) or "true"
    async with engine.connect() as conn:
        rows = (await conn.execute(
            text(f"SELECT * FROM audit_records WHERE {clause} ORDER BY seq"), where)).mappings()
        return [dict(r) for r in rows]


async def all_audit_text(engine: AsyncEngine) -> str:
    """Every audit row as PostgreSQL's text of the whole row (to search for a secret)."""
    async with engine.connect() as conn:
        return "\n".join((await conn.execute(
            text("SELECT a::text FROM audit_records a"))).scalars())


async def receipt_time(engine: AsyncEngine, command_id: str):
    """``created_at`` of the command's receipt: its transaction's ``now()``."""
    async with engine.connect() as conn:
        return (await conn.execute(
            text("SELECT created_at FROM command_receipts WHERE command_id = :c"),
            {"c": command_id})).scalar_one()


async def refuse_commits(engine: AsyncEngine, table: str) -> None:
    """Make every transaction that inserts into ``table`` fail at COMMIT (a deferred
    constraint trigger): the decision is made, its audit record appended, then all of
    it rolls back."""
    async with engine.begin() as conn:
        await conn.execute(text(
            "CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'commit refused by the test'; END $$"))
        await conn.execute(text(
            f"CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON {table} "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()"))


async def allow_commits(engine: AsyncEngine, table: str) -> None:
    """Undo :func:`refuse_commits`."""
    async with engine.begin() as conn:
        await conn.execute(text(f"DROP TRIGGER refuse_commit ON {table}"))
