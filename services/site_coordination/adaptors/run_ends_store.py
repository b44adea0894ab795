"""The ``ended_runs`` table and a Run's outstanding repository grants, inside the
caller's transaction (:class:`~site_coordination.application.ports.RunEnds`)."""

from __future__ import annotations

from sqlalchemy import exists, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from site_coordination.adaptors.tables import ended_runs, repository_grants


class PostgresRunEnds:
    """:class:`RunEnds` over PostgreSQL (``session``: the caller's transaction)."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def record_run_end(self, run_id: str, outcome: str) -> bool:
        """``INSERT INTO ended_runs … ON CONFLICT DO NOTHING``; True when new."""
        row = (await self.session.execute(
            insert(ended_runs).values(run_id=run_id, outcome=outcome)
            .on_conflict_do_nothing(index_elements=["run_id"])
            .returning(ended_runs.c.run_id))).first()
        return row is not None

    async def run_ended(self, run_id: str) -> bool:
        """Whether ``ended_runs`` has the Run."""
        return bool((await self.session.execute(
            select(exists().where(ended_runs.c.run_id == run_id)))).scalar())

    async def outstanding_grants(self, run_id: str) -> list[tuple[str, str]]:
        """``(grant_id, provider_ref)`` of the Run's unrevoked repository grants, locked
        (``FOR UPDATE``) in grant order so concurrent revocations queue, not deadlock."""
        rows = (await self.session.execute(
            select(repository_grants.c.grant_id, repository_grants.c.provider_ref)
            .where((repository_grants.c.run_id == run_id)
                   & repository_grants.c.revoked_at.is_(None))
            .order_by(repository_grants.c.grant_id)
            .with_for_update())).all()
        return [(r.grant_id, r.provider_ref) for r in rows]
