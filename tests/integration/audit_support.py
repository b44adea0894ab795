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
