"""The port of array groups (ADR 0032): groups, their members and counters.

Implemented by :class:`~execution_core.adaptors.array_store.SqlArrayStore`. Every
method runs in the caller's transaction. A group's row is the lock its deciders
take first, before any Run row, so deciding never deadlocks with a Run's step.
"""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

Row = dict[str, Any]


class ArrayStore(Protocol):
    """Array groups and the index ↔ Run / Attempt mapping."""

    async def ensure_group(self, session: AsyncSession, values: Row) -> Row:
        """Insert the group unless it exists; return its row, locked."""
        ...

    async def find_group(self, session: AsyncSession, group_id: str, *, for_update: bool = False
                         ) -> Row | None:
        """The group's row (locked when asked); None when absent."""
        ...

    async def member_at(self, session: AsyncSession, group_id: str, index: int) -> Row | None:
        """The member at ``index``; None when none is."""
        ...

    async def insert_member(self, session: AsyncSession, group_id: str, index: int, run_id: str) -> None:
        """Map ``index`` to ``run_id``."""
        ...

    async def set_member_attempt(self, session: AsyncSession, run_id: str, attempt_id: str,
                                 number: int) -> None:
        """Map the member Run to the Attempt its array task starts."""
        ...

    async def facts_of_run(self, session: AsyncSession, run_id: str, *, for_update: bool = False
                           ) -> Row | None:
        """The Run's group with its index, member Attempt and start-array command's
        ``command_seq`` / ``command_at``; None for a Run of no group."""
        ...

    async def count_prepare(self, session: AsyncSession, attempt_id: str, succeeded: bool) -> str | None:
        """Count a member's answered prepare on its forming group; return the group id."""
        ...

    async def add_dropped(self, session: AsyncSession, group_id: str) -> None:
        """One more child ended before its forming group settled."""
        ...

    async def update_group(self, session: AsyncSession, group_id: str, values: Row) -> None:
        """Write the group's new values."""
        ...

    async def members(self, session: AsyncSession, group_id: str) -> list[Row]:
        """Every member in index order."""
        ...

    async def group_of_attempt(self, session: AsyncSession, attempt_id: str) -> Row | None:
        """The group of the member Attempt, locked; None when it has none."""
        ...

    async def take_slot(self, session: AsyncSession, group_id: str, run_id: str) -> None:
        """The member starts on its own and holds a maxActive slot."""
        ...

    async def free_slot(self, session: AsyncSession, group_id: str, run_id: str) -> None:
        """The member ended: free its slot and make the next waiting members due."""
        ...

    async def insert_relayed_starts(self, session: AsyncSession, rows: list[Row]) -> None:
        """Insert children's ``start`` rows taken from a start-array result."""
        ...

    async def wake_members(self, session: AsyncSession, group_id: str, *, except_run: str = "") -> None:
        """Make every other member due now."""
        ...
