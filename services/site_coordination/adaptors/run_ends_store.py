"""The ``ended_runs`` and ``ended_attempts`` tables and the outstanding repository grants
of a Run or an Attempt, inside the caller's transaction
(:class:`~site_coordination.application.ports.RunEnds`)."""

from __future__ import annotations

from sqlalchemy import exists, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from site_coordination.adaptors.tables import (
    ended_attempts,
    ended_runs,
    repository_grants,
    site_commands,
)


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
        return await self._outstanding(repository_grants.c.run_id == run_id)

    async def record_attempt_end(self, attempt_id: str, run_id: str, reason: str) -> bool:
        """``INSERT INTO ended_attempts … ON CONFLICT DO NOTHING``; True when new."""
        row = (await self.session.execute(
            insert(ended_attempts).values(attempt_id=attempt_id, run_id=run_id, reason=reason)
            .on_conflict_do_nothing(index_elements=["attempt_id"])
            .returning(ended_attempts.c.attempt_id))).first()
        return row is not None

    async def attempt_ended(self, attempt_id: str) -> bool:
        """Whether ``ended_attempts`` has the Attempt."""
        return bool((await self.session.execute(
            select(exists().where(ended_attempts.c.attempt_id == attempt_id)))).scalar())

    async def earlier_open_attempts(self, run_id: str, attempt_number: int) -> list[str]:
        """Attempts of ``run_id`` with a lower number that no row of ``ended_attempts``
        names (``site_commands_run``), in id order."""
        rows = (await self.session.execute(
            select(site_commands.c.attempt_id).distinct()
            .where((site_commands.c.run_id == run_id)
                   & (site_commands.c.attempt_number < attempt_number)
                   & ~exists().where(ended_attempts.c.attempt_id == site_commands.c.attempt_id))
            .order_by(site_commands.c.attempt_id))).all()
        return [r.attempt_id for r in rows]

    async def outstanding_attempt_grants(self, attempt_id: str) -> list[tuple[str, str]]:
        """As :meth:`outstanding_grants`, for one Attempt."""
        return await self._outstanding(repository_grants.c.attempt_id == attempt_id)

    async def _outstanding(self, which) -> list[tuple[str, str]]:
        rows = (await self.session.execute(
            select(repository_grants.c.grant_id, repository_grants.c.provider_ref)
            .where(which & repository_grants.c.revoked_at.is_(None))
            .order_by(repository_grants.c.grant_id)
            .with_for_update())).all()
        return [(r.grant_id, r.provider_ref) for r in rows]
