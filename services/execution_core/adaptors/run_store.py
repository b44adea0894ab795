"""PostgreSQL implementation of :class:`~execution_core.application.ports.RunStore`.

Versioned writes (``version = expected``) give the optimistic checks of seed 004
§4D; lease-held writes (:func:`metallo.persistence.leases.held`) give the
fencing of §3D/§4E. Both are evaluated by PostgreSQL in the UPDATE itself. The
statements themselves, built once (ADRs 0011, 0013), are in
:mod:`~execution_core.adaptors.run_statements`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.adaptors import run_statements as sql
from execution_core.adaptors.run_statements import Row
from execution_core.adaptors.tables import (
    attempts,
    run_decisions,
    run_transitions,
    runs,
    site_commands,
)
from execution_core.domain.states import ATTEMPT_TERMINAL
from metallo.persistence.leases import Claim, LeaseLost, held
from metallo.persistence.prebuilt import (
    has_expressions,
    insert_statement,
    value_params,
)


class SqlRunStore:
    """Runs, Attempts and Site commands in Execution Core's database."""

    async def now(self, session: AsyncSession) -> datetime:
        """``SELECT now()`` — the transaction's database time."""
        return (await session.execute(sql.NOW)).scalar_one()

    async def insert_run(self, session: AsyncSession, values: Row) -> None:
        """``INSERT INTO runs``."""
        await session.execute(*insert_statement(runs, values))

    async def find_run(
        self, session: AsyncSession, run_id: str, *, for_update: bool = False
    ) -> Row | None:
        """``SELECT`` the Run by id (``FOR UPDATE`` when asked); None when absent."""
        stmt = sql.FIND_RUN_FOR_UPDATE if for_update else sql.FIND_RUN
        return sql.as_row((await session.execute(stmt, {"w_run_id": run_id})).first())

    async def find_run_at(
        self, session: AsyncSession, run_id: str
    ) -> tuple[Row | None, datetime | None]:
        """The Run by id and the transaction's ``now()`` in one round trip; (None, None) when absent."""
        row = sql.as_row((await session.execute(sql.FIND_RUN_AT, {"w_run_id": run_id})).first())
        if row is None:
            return None, None
        return row, row.pop("db_now")

    async def wake_run(self, session: AsyncSession, run_id: str) -> bool:
        """Make a non-terminal Run due now and bump its version, in one ``UPDATE``
        (the trigger of migration 0006 then wakes its supervisor). False when the
        Run is absent or terminal."""
        return (await session.execute(sql.WAKE_RUN, {"w_run_id": run_id})).rowcount == 1

    async def note_native_end(self, session: AsyncSession, attempt_id: str) -> str | None:
        """Set ``native_end_noticed_at`` to ``now()`` and ``native_end_noticed_after_seq``
        to the ``seq`` of the Attempt's newest command (0: none) on a not yet ended
        Attempt that has no notice (ADR 0016); return its Run id, or None when the Attempt is absent, ended or
        already noticed (one ``UPDATE … RETURNING``)."""
        row = (await session.execute(sql.NOTE_NATIVE_END, {"w_attempt_id": attempt_id})).first()
        return None if row is None else row.run_id

    async def note_waiting(
        self, session: AsyncSession, run_id: str, attempt_id: str, command_id: str, code: str
    ) -> bool:
        """See :meth:`RunStore.note_waiting` (one ``UPDATE``; the due trigger wakes the
        supervisor)."""
        params = {
            "w_run_id": run_id,
            "w_attempt_id": attempt_id,
            "w_command_id": command_id,
            "w_code": code,
        }
        return (await session.execute(sql.NOTE_WAITING, params)).rowcount == 1

    async def clear_waiting(self, session: AsyncSession, run_id: str, command_id: str) -> None:
        """See :meth:`RunStore.clear_waiting`."""
        await session.execute(sql.CLEAR_WAITING, {"w_run_id": run_id, "w_command_id": command_id})

    async def mark_attempt_lost(
        self, session: AsyncSession, attempt_id: str, actor: str
    ) -> bool:
        """See :meth:`RunStore.mark_attempt_lost`."""
        stmt = (
            update(attempts)
            .where(
                attempts.c.attempt_id == attempt_id,
                attempts.c.lost_marked_at.is_(None),
                attempts.c.state.not_in(sorted(ATTEMPT_TERMINAL)),
            )
            .values(lost_marked_at=func.now(), lost_marked_by=actor)
        )
        return (await session.execute(stmt)).rowcount == 1

    async def append_decision(self, session: AsyncSession, values: Row) -> None:
        """``INSERT`` into ``run_decisions`` (a trigger refuses UPDATE and DELETE)."""
        await session.execute(run_decisions.insert().values(**values))

    async def decisions_of(self, session: AsyncSession, run_id: str) -> list[Row]:
        """``SELECT`` the Run's ``run_decisions`` rows, oldest first."""
        stmt = (
            select(run_decisions)
            .where(run_decisions.c.run_id == run_id)
            .order_by(run_decisions.c.id)
        )
        return [dict(r._mapping) for r in (await session.execute(stmt)).all()]

    async def find_by_launch_key(
        self, session: AsyncSession, project: str, launch_key: str
    ) -> Row | None:
        """``SELECT`` the Run by (project, launch_key); None when absent."""
        stmt = select(runs).where(runs.c.project == project, runs.c.launch_key == launch_key)
        return sql.as_row((await session.execute(stmt)).first())

    async def update_run(
        self,
        session: AsyncSession,
        run_id: str,
        expected_version: int,
        values: Row,
        *,
        claim: Claim | None = None,
        release: bool = False,
    ) -> bool:
        """``UPDATE runs`` where the version (and the lease, when ``claim``) still match.

        Bumps ``version``, sets ``updated_at = now()``; ``release`` also clears the
        lease. Returns True when exactly one row changed.
        """
        if has_expressions(values):
            cond = and_(runs.c.run_id == run_id, runs.c.version == expected_version)
            if claim is not None:
                cond = and_(cond, held(runs, claim))
            values = {**values, "version": runs.c.version + 1, "updated_at": func.now()}
            if release:
                values.update(lease_owner=None, lease_token=None, lease_expires_at=None)
            result = await session.execute(update(runs).where(cond).values(**values))
            return result.rowcount == 1
        dropped = sql.RUN_BOOKKEEPING + (sql.LEASE if release else ())
        values = {k: v for k, v in values.items() if k not in dropped}
        stmt = sql.update_run_statement(tuple(sorted(values)), claim is not None, release)
        params = {**value_params(values), "w_run_id": run_id, "w_version": expected_version}
        if claim is not None:
            if claim.key != run_id:
                return False  # the claim is another Run's: it cannot hold this row
            params["w_lease_token"] = claim.token
        result = await session.execute(stmt, params)
        return result.rowcount == 1

    async def claim_for_planning(
        self, session: AsyncSession, owner: str, lease_seconds: float, limit: int
    ) -> list[Claim]:
        """Lease due ``accepted`` Runs by ``next_wake_at`` (a prebuilt :class:`ClaimStatement`)."""
        return await sql.PLANNING.claim(session, owner, lease_seconds, limit)

    async def claim_for_supervision(
        self, session: AsyncSession, owner: str, lease_seconds: float, limit: int
    ) -> list[Claim]:
        """Lease due planned, non-terminal Runs by ``next_wake_at`` (a prebuilt claim)."""
        return await sql.SUPERVISION.claim(session, owner, lease_seconds, limit)

    async def release_claim(self, session: AsyncSession, claim: Claim, values: Row) -> None:
        """Clear the lease (fenced by :func:`held`) and write ``values``.

        Raises :class:`LeaseLost` when the lease expired or moved on.
        """
        result = await session.execute(
            update(runs)
            .where(held(runs, claim))
            .values(lease_owner=None, lease_token=None, lease_expires_at=None, **values)
        )
        if result.rowcount != 1:
            raise LeaseLost(f"lease on run {claim.key} generation {claim.generation} lost")

    async def count_active(self, session: AsyncSession, project: str) -> tuple[int, dict[str, int]]:
        """Count non-accepted, non-terminal Runs: in the Project, and per Site over all Projects."""
        active = and_(runs.c.phase != sql.ACCEPTED, runs.c.phase != sql.TERMINAL)
        in_project = (
            await session.execute(
                select(func.count()).select_from(runs).where(active, runs.c.project == project)
            )
        ).scalar_one()
        per_site = {
            r.site_id: r.n
            for r in (
                await session.execute(
                    select(runs.c.site_id, func.count().label("n"))
                    .where(active)
                    .group_by(runs.c.site_id)
                )
            ).all()
        }
        return int(in_project), per_site

    async def lock_admission(self, session: AsyncSession, project: str) -> None:
        # One admission lock for every Project: Site limits span Projects.
        """Take one transaction-scoped advisory lock shared by every Project."""
        await session.execute(
            select(func.pg_advisory_xact_lock(func.hashtextextended("execution_core:admission", 0)))
        )

    async def insert_attempt(self, session: AsyncSession, values: Row) -> None:
        """``INSERT INTO attempts``."""
        await session.execute(*insert_statement(attempts, values))

    async def update_attempt(self, session: AsyncSession, attempt_id: str, values: Row) -> None:
        """``UPDATE attempts`` by id."""
        if has_expressions(values):
            await session.execute(
                update(attempts).where(attempts.c.attempt_id == attempt_id).values(**values)
            )
            return
        stmt = sql.update_attempt_statement(tuple(sorted(values)))
        await session.execute(stmt, {**value_params(values), "w_attempt_id": attempt_id})

    async def attempts_of(self, session: AsyncSession, run_id: str) -> list[Row]:
        """``SELECT`` the Run's Attempts ordered by ``number``."""
        rows = (await session.execute(sql.ATTEMPTS_OF, {"w_run_id": run_id})).all()
        return [dict(r._mapping) for r in rows]

    async def find_attempt(self, session: AsyncSession, attempt_id: str) -> Row | None:
        """``SELECT`` one Attempt by id; None when absent."""
        return sql.as_row((await session.execute(sql.CURRENT_ATTEMPT, {"w_attempt_id": attempt_id})).first())

    async def commands_of(self, session: AsyncSession, attempt_id: str) -> list[Row]:
        """``SELECT`` the Attempt's Site commands ordered by ``seq``."""
        rows = (await session.execute(sql.COMMANDS_OF, {"w_attempt_id": attempt_id})).all()
        return [dict(r._mapping) for r in rows]

    async def insert_command(self, session: AsyncSession, values: Row) -> Row:
        """``INSERT INTO site_commands ... RETURNING *``."""
        stmt, params = insert_statement(site_commands, values, returning=True)
        return dict((await session.execute(stmt, params)).one()._mapping)

    async def find_command(
        self, session: AsyncSession, command_id: str, *, for_update: bool = False
    ) -> Row | None:
        """``SELECT`` the Site command by id (``FOR UPDATE`` when asked); None when absent."""
        stmt = sql.FIND_COMMAND_FOR_UPDATE if for_update else sql.FIND_COMMAND
        return sql.as_row((await session.execute(stmt, {"w_command_id": command_id})).first())

    async def record_result(self, session: AsyncSession, command_id: str, values: Row) -> None:
        """``UPDATE site_commands`` (``values``, ``result_at = now()``) while no outcome."""
        if has_expressions(values) or "result_at" in values:
            await session.execute(
                update(site_commands)
                .where(site_commands.c.command_id == command_id, site_commands.c.outcome.is_(None))
                .values(result_at=func.now(), **values)
            )
            return
        stmt = sql.record_result_statement(tuple(sorted(values)))
        await session.execute(stmt, {**value_params(values), "w_command_id": command_id})

    async def append_transition(self, session: AsyncSession, values: Row) -> None:
        """``INSERT INTO run_transitions`` (one row of the Run's state history)."""
        await session.execute(*insert_statement(run_transitions, values))

    async def transitions_of(self, session: AsyncSession, run_id: str) -> list[Row]:
        """``SELECT`` the Run's transitions ordered by ``version``."""
        stmt = (
            select(run_transitions)
            .where(run_transitions.c.run_id == run_id)
            .order_by(run_transitions.c.version)
        )
        return [dict(r._mapping) for r in (await session.execute(stmt)).all()]

    async def list_runs(
        self,
        session: AsyncSession,
        project: str,
        *,
        workload_id: str,
        phase: str,
        outcome: str,
        active_only: bool,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[Row]:
        """``SELECT`` a keyset page of the Project's Runs (see the port's :meth:`list_runs`)."""
        stmt = select(runs).where(runs.c.project == project)
        if workload_id:
            stmt = stmt.where(runs.c.workload_id == workload_id)
        if phase:
            stmt = stmt.where(runs.c.phase == phase)
        if outcome:
            stmt = stmt.where(runs.c.outcome == outcome)
        if active_only:
            stmt = stmt.where(runs.c.phase != sql.TERMINAL)
        if after is not None:
            at, run_id = after
            stmt = stmt.where(
                or_(runs.c.accepted_at < at, and_(runs.c.accepted_at == at, runs.c.run_id < run_id))
            )
        stmt = stmt.order_by(runs.c.accepted_at.desc(), runs.c.run_id.desc()).limit(limit)
        return [dict(r._mapping) for r in (await session.execute(stmt)).all()]
