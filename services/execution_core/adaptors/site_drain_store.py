"""Draining Sites and platform-wide Run counts in Execution Core's database
(``site_drains``, ``runs``); every method runs in the caller's transaction."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.adaptors.tables import runs, site_drains
from execution_core.domain.states import PHASE_ACCEPTED, PHASE_TERMINAL

_ACCEPTED = literal(PHASE_ACCEPTED, literal_execute=True)
_TERMINAL = literal(PHASE_TERMINAL, literal_execute=True)
_COLUMNS = (site_drains.c.site_id, site_drains.c.drained_by, site_drains.c.reason,
            site_drains.c.drained_at)


class SqlSiteDrainStore:
    """:class:`~execution_core.application.ports.SiteDrainStore` over PostgreSQL."""

    async def drain(self, session: AsyncSession, site_id: str, member: str,
                    reason: str) -> tuple[dict, bool]:
        """Mark the Site draining; (its drain row, True when it already was)."""
        row = (await session.execute(
            insert(site_drains).values(site_id=site_id, drained_by=member, reason=reason)
            .on_conflict_do_nothing(index_elements=["site_id"]).returning(*_COLUMNS)
        )).mappings().first()
        if row is not None:
            return dict(row), False
        existing = (await session.execute(
            select(*_COLUMNS).where(site_drains.c.site_id == site_id))).mappings().one()
        return dict(existing), True

    async def resume(self, session: AsyncSession, site_id: str) -> bool:
        """Stop draining the Site; True when it was draining."""
        done = await session.execute(
            delete(site_drains).where(site_drains.c.site_id == site_id)
            .returning(site_drains.c.site_id))
        return done.first() is not None

    async def drains(self, session: AsyncSession) -> list[dict]:
        """Every draining Site's row, by Site id."""
        rows = await session.execute(select(*_COLUMNS).order_by(site_drains.c.site_id))
        return [dict(r) for r in rows.mappings()]

    async def draining_ids(self, session: AsyncSession) -> frozenset[str]:
        """Ids of the draining Sites."""
        rows = await session.execute(select(site_drains.c.site_id))
        return frozenset(r.site_id for r in rows)

    async def is_draining(self, session: AsyncSession, site_id: str) -> bool:
        """Whether the Site is draining."""
        found = await session.execute(
            select(literal(1)).where(site_drains.c.site_id == site_id))
        return found.first() is not None

    async def active_runs_by_site(self, session: AsyncSession) -> dict[str, int]:
        """Runs not terminal yet per target Site (accepted Runs have none yet)."""
        rows = await session.execute(
            select(runs.c.site_id, func.count().label("n"))
            .where(runs.c.phase != _TERMINAL, runs.c.phase != _ACCEPTED)
            .group_by(runs.c.site_id))
        return {r.site_id: int(r.n) for r in rows}

    async def count_active(self, session: AsyncSession, site_id: str | None = None,
                           attempt_ids: Sequence[str] | None = None) -> int:
        """Runs not terminal yet (accepted ones too); with ``site_id`` only those placed
        on that Site, with ``attempt_ids`` only those whose current Attempt is one of them."""
        query = select(func.count()).select_from(runs).where(runs.c.phase != _TERMINAL)
        if site_id is not None:
            query = query.where(runs.c.site_id == site_id)
        if attempt_ids is not None:
            query = query.where(runs.c.current_attempt_id.in_(list(attempt_ids)))
        return int((await session.execute(query)).scalar_one())

    async def wake_held(self, session: AsyncSession, site_id: str, code: str) -> int:
        """Make due now every Run waiting with ``code`` for this Site, or accepted
        and waiting with ``code`` (no target yet); how many."""
        done = await session.execute(
            update(runs).where(
                runs.c.phase != _TERMINAL,
                (and_(runs.c.phase == _ACCEPTED, runs.c.planning_wait_code == code))
                | and_(runs.c.site_id == site_id, runs.c.waiting_reason == code),
            ).values(next_wake_at=func.now()).returning(runs.c.run_id))
        return len(done.all())
