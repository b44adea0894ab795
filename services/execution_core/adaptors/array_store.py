"""PostgreSQL implementation of :class:`~execution_core.application.array_ports.ArrayStore`.

A group's completion is read from its own row (``prepared`` / ``dropped``
counters, bumped once per child as its prepare result is applied), never by
reading every member: deciding a group costs one row, whatever its size. Only the
dispatch and the start-array result read the members, once each.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.adaptors.run_statements import ACCEPTED, TERMINAL
from execution_core.adaptors.tables import array_groups, array_members, runs, site_commands
from execution_core.domain.arrays import FORMING

Row = dict[str, Any]

_FACTS = (
    select(
        array_groups,
        array_members.c.index,
        array_members.c.attempt_id.label("member_attempt_id"),
        array_members.c.slot,
        site_commands.c.seq.label("command_seq"),
        site_commands.c.created_at.label("command_at"),
    )
    .join(array_members, array_members.c.group_id == array_groups.c.group_id)
    .outerjoin(site_commands, site_commands.c.command_id == array_groups.c.command_id)
)


class SqlArrayStore:
    """Array groups and their members in Execution Core's database."""

    async def ensure_group(self, session: AsyncSession, values: Row) -> Row:
        """Insert the group unless it exists; return its row (``FOR UPDATE``)."""
        await session.execute(insert(array_groups).values(**values).on_conflict_do_nothing())
        return await self.find_group(session, values["group_id"], for_update=True)  # type: ignore[return-value]

    async def find_group(self, session: AsyncSession, group_id: str, *, for_update: bool = False
                         ) -> Row | None:
        """The group's row (locked when asked); None when absent."""
        stmt = select(array_groups).where(array_groups.c.group_id == group_id)
        if for_update:
            stmt = stmt.with_for_update()
        row = (await session.execute(stmt)).first()
        return None if row is None else dict(row._mapping)

    async def member_at(self, session: AsyncSession, group_id: str, index: int) -> Row | None:
        """The member at ``index`` of the group; None when none is."""
        row = (await session.execute(select(array_members).where(
            array_members.c.group_id == group_id, array_members.c.index == index))).first()
        return None if row is None else dict(row._mapping)

    async def insert_member(self, session: AsyncSession, group_id: str, index: int, run_id: str) -> None:
        """Map ``index`` of the group to ``run_id`` (its Attempt follows at planning)."""
        await session.execute(array_members.insert().values(group_id=group_id, index=index, run_id=run_id))

    async def set_member_attempt(self, session: AsyncSession, run_id: str, attempt_id: str,
                                 number: int) -> None:
        """Map the member ``run_id`` to its Attempt (the one its array task starts)."""
        await session.execute(update(array_members).where(array_members.c.run_id == run_id)
                              .values(attempt_id=attempt_id, attempt_number=number))

    async def facts_of_run(self, session: AsyncSession, run_id: str, *, for_update: bool = False
                           ) -> Row | None:
        """The Run's group row with its index, member Attempt and the start-array command's
        ``seq`` / ``created_at`` (one statement); locks the group row when asked."""
        stmt = _FACTS.where(array_members.c.run_id == run_id)
        if for_update:
            stmt = stmt.with_for_update(of=array_groups)
        row = (await session.execute(stmt)).first()
        return None if row is None else dict(row._mapping)

    async def count_prepare(self, session: AsyncSession, attempt_id: str, succeeded: bool) -> str | None:
        """A member Attempt's prepare was answered: bump its forming group's ``prepared``
        (or ``dropped`` for a refusal) in one UPDATE; return the group id (None: no group)."""
        column = array_groups.c.prepared if succeeded else array_groups.c.dropped
        stmt = (
            update(array_groups)
            .where(
                array_groups.c.group_id == array_members.c.group_id,
                array_members.c.attempt_id == attempt_id,
                array_groups.c.state == FORMING,
            )
            .values({column.name: column + 1})
            .returning(array_groups.c.group_id)
        )
        row = (await session.execute(stmt)).first()
        return None if row is None else row.group_id

    async def add_dropped(self, session: AsyncSession, group_id: str) -> None:
        """One more child ended before its forming group settled."""
        await session.execute(update(array_groups).where(
            array_groups.c.group_id == group_id, array_groups.c.state == FORMING,
        ).values(dropped=array_groups.c.dropped + 1))

    async def update_group(self, session: AsyncSession, group_id: str, values: Row) -> None:
        """``UPDATE array_groups`` by id (``settled_at = now()`` when the state changes)."""
        if "state" in values:
            values = {**values, "settled_at": func.now()}
        await session.execute(update(array_groups).where(array_groups.c.group_id == group_id)
                              .values(**values))

    async def members(self, session: AsyncSession, group_id: str) -> list[Row]:
        """Every member of the group in index order."""
        stmt = select(array_members).where(array_members.c.group_id == group_id).order_by(array_members.c.index)
        return [dict(r._mapping) for r in (await session.execute(stmt)).all()]

    async def group_of_attempt(self, session: AsyncSession, attempt_id: str) -> Row | None:
        """The group whose member is ``attempt_id``, locked; None when it has none."""
        stmt = (select(array_groups)
                .join(array_members, array_members.c.group_id == array_groups.c.group_id)
                .where(array_members.c.attempt_id == attempt_id)
                .with_for_update(of=array_groups))
        row = (await session.execute(stmt)).first()
        return None if row is None else dict(row._mapping)

    async def take_slot(self, session: AsyncSession, group_id: str, run_id: str) -> None:
        """The member starts on its own: it holds one of the group's maxActive slots."""
        await session.execute(update(array_groups).where(array_groups.c.group_id == group_id)
                              .values(individual_active=array_groups.c.individual_active + 1))
        await session.execute(update(array_members).where(array_members.c.run_id == run_id).values(slot="held"))

    async def free_slot(self, session: AsyncSession, group_id: str, run_id: str) -> None:
        """The member ended: its slot is free, and the first members still waiting for one
        (index order, as many as slots are free) are made due."""
        row = (await session.execute(
            update(array_groups).where(array_groups.c.group_id == group_id)
            .values(individual_active=array_groups.c.individual_active - 1)
            .returning(array_groups.c.max_active, array_groups.c.individual_active))).one()
        await session.execute(update(array_members).where(array_members.c.run_id == run_id).values(slot="done"))
        waiting = (
            select(array_members.c.run_id)
            .join(runs, runs.c.run_id == array_members.c.run_id)
            .where(array_members.c.group_id == group_id, array_members.c.slot == "",
                   runs.c.phase != ACCEPTED, runs.c.phase != TERMINAL)
            .order_by(array_members.c.index)
            .limit(max(row.max_active - row.individual_active, 0))
        )
        await session.execute(update(runs).where(runs.c.run_id.in_(waiting.scalar_subquery())).values(
            next_wake_at=func.now(), version=runs.c.version + 1, updated_at=func.now()))

    async def insert_relayed_starts(self, session: AsyncSession, rows: list[Row]) -> None:
        """Insert the children's ``start`` rows recorded from a start-array result."""
        if rows:
            await session.execute(site_commands.insert(), rows)

    async def wake_members(self, session: AsyncSession, group_id: str, *, except_run: str = "") -> None:
        """Make every other member due now: a planned Run's version is bumped (its
        supervisor re-reads), an accepted one is only made due (its planning goes on)."""
        member_runs = select(array_members.c.run_id).where(
            array_members.c.group_id == group_id, array_members.c.run_id != except_run)
        planned = and_(runs.c.run_id.in_(member_runs), runs.c.phase != ACCEPTED, runs.c.phase != TERMINAL)
        await session.execute(update(runs).where(planned).values(
            next_wake_at=func.now(), version=runs.c.version + 1, updated_at=func.now()))
        await session.execute(update(runs).where(
            runs.c.run_id.in_(member_runs), runs.c.phase == ACCEPTED).values(next_wake_at=func.now()))
