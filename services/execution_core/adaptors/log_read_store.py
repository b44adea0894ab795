"""PostgreSQL implementation of :class:`~execution_core.application.ports.LogReadStore`
(table ``log_reads``; seed 001, Private Run log commands)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.adaptors.tables import log_reads

Row = dict[str, Any]


class SqlLogReadStore:
    """Log reads in Execution Core's database; every method runs in the caller's transaction."""

    async def insert_read(self, session: AsyncSession, values: Row) -> None:
        """``INSERT INTO log_reads``."""
        await session.execute(insert(log_reads).values(**values))

    async def find_read(self, session: AsyncSession, read_id: str) -> Row | None:
        """``SELECT`` the read by ``read_id``; None when absent."""
        row = (
            await session.execute(select(log_reads).where(log_reads.c.read_id == read_id))
        ).first()
        return None if row is None else dict(row._mapping)

    async def find_read_by_command(
        self, session: AsyncSession, command_id: str, *, for_update: bool = False
    ) -> Row | None:
        """``SELECT`` the read by ``command_id`` (``FOR UPDATE`` when asked); None when absent."""
        stmt = select(log_reads).where(log_reads.c.command_id == command_id)
        if for_update:
            stmt = stmt.with_for_update()
        row = (await session.execute(stmt)).first()
        return None if row is None else dict(row._mapping)

    async def answer_read(self, session: AsyncSession, read_id: str, values: Row) -> bool:
        """Write the answer once: only a ``pending`` read changes (True when it did)."""
        result = await session.execute(
            update(log_reads)
            .where(log_reads.c.read_id == read_id, log_reads.c.state == "pending")
            .values(**values)
        )
        return result.rowcount == 1

    async def prune_reads(self, session: AsyncSession, before: datetime, *, limit: int) -> int:
        """Delete at most ``limit`` reads created before ``before`` that are no longer
        pending (answered or past their deadline); the number deleted."""
        oldest = (
            select(log_reads.c.read_id)
            .where(
                log_reads.c.created_at < before,
                (log_reads.c.state != "pending") | (log_reads.c.deadline_at < before),
            )
            .order_by(log_reads.c.created_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        result = await session.execute(delete(log_reads).where(log_reads.c.read_id.in_(oldest)))
        return result.rowcount or 0
