"""Fenced leases on durable work rows (DESIGN.md, Persistence; seed 004, 4E).

A claimable table has these columns (see :func:`lease_columns`):

- ``lease_owner`` text — who holds the lease (diagnostics only),
- ``lease_token`` uuid — random per claim; every write by the holder names it,
- ``lease_generation`` bigint — incremented on every claim (monotonic fence),
- ``lease_expires_at`` timestamptz — the holder's deadline on PostgreSQL's clock.

A worker claims ready rows with ``FOR UPDATE SKIP LOCKED`` (:func:`claim_rows`),
does its work outside any transaction, then writes with :func:`fenced_update`,
which refuses (raises :class:`LeaseLost`) when the lease expired or another
worker claimed the row since. The database clock is the only clock used.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    Integer,
    Table,
    Text,
    and_,
    bindparam,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement


class LeaseLost(Exception):
    """The caller's lease expired or was taken over; its write was refused."""


@dataclass(frozen=True)
class Claim:
    """A held lease: the row's primary key, the fencing token and generation."""

    key: Any
    token: uuid.UUID
    generation: int


def lease_columns() -> list[Column]:
    """Fresh lease columns to add to a claimable ``Table`` definition."""
    return [
        Column("lease_owner", Text, nullable=True),
        Column("lease_token", UUID(as_uuid=True), nullable=True),
        Column("lease_generation", BigInteger, nullable=False, server_default="0"),
        Column("lease_expires_at", DateTime(timezone=True), nullable=True),
    ]


def _interval(seconds: float):
    return func.make_interval(0, 0, 0, 0, 0, 0, seconds)


class ClaimStatement:
    """The claim of :func:`claim_rows` for one ``table``, ``ready`` condition and order,
    built once with the owner, lease length and limit as bind parameters (ADR 0013:
    building it cost more than running it). Build it at import time for hot paths."""

    def __init__(self, table: Table, *, ready: ColumnElement[bool], order_by: Any = None):
        (pk,) = table.primary_key.columns
        free = or_(table.c.lease_expires_at.is_(None), table.c.lease_expires_at <= func.now())
        candidates = (
            select(pk)
            .where(and_(ready, free))
            .order_by(order_by if order_by is not None else pk)
            .limit(bindparam("w_claim_limit", type_=Integer))
            .with_for_update(skip_locked=True)
            .cte("candidates")
        )
        lease = func.make_interval(0, 0, 0, 0, 0, 0, bindparam("w_lease_seconds", type_=Float))
        self.statement = (
            update(table)
            .where(pk.in_(select(candidates.c[pk.name])))
            .values(
                lease_owner=bindparam("w_claim_owner", type_=Text),
                lease_token=func.gen_random_uuid(),
                lease_generation=table.c.lease_generation + 1,
                lease_expires_at=func.now() + lease,
            )
            .returning(pk, table.c.lease_token, table.c.lease_generation)
        )

    async def claim(
        self, session: AsyncSession, owner: str, lease_seconds: float, limit: int = 10
    ) -> list[Claim]:
        """Claim up to ``limit`` ready rows whose lease is free or expired, for
        ``lease_seconds`` on PostgreSQL's clock, in the caller's transaction (the claims
        become visible to others when it commits). One :class:`Claim` per row, keyed by
        the table's single primary-key column."""
        params = {
            "w_claim_owner": owner,
            "w_lease_seconds": float(lease_seconds),
            "w_claim_limit": int(limit),
        }
        rows = (await session.execute(self.statement, params)).all()
        return [Claim(key=r[0], token=r[1], generation=r[2]) for r in rows]


async def claim_rows(
    session: AsyncSession,
    table: Table,
    *,
    ready: ColumnElement[bool],
    owner: str,
    lease_seconds: float,
    limit: int = 10,
    order_by: Any = None,
) -> list[Claim]:
    """Claim up to ``limit`` rows matching ``ready`` whose lease is free or expired.

    Runs in the caller's transaction; the claims become visible to others when it
    commits. ``lease_seconds`` is measured on PostgreSQL's clock. Returns one
    :class:`Claim` per row, keyed by the table's single primary-key column. Builds the
    statement on every call: hot paths keep a :class:`ClaimStatement` instead.
    """
    statement = ClaimStatement(table, ready=ready, order_by=order_by)
    return await statement.claim(session, owner, lease_seconds, limit)


def held(table: Table, claim: Claim) -> ColumnElement[bool]:
    """SQL condition: ``claim`` still holds its row's lease (token matches, not expired)."""
    (pk,) = table.primary_key.columns
    return and_(
        pk == claim.key,
        table.c.lease_token == claim.token,
        table.c.lease_expires_at > func.now(),
    )


async def fenced_update(
    session: AsyncSession,
    table: Table,
    claim: Claim,
    *,
    extend_seconds: float | None = None,
    **values: Any,
) -> None:
    """Write ``values`` to the claimed row only while ``claim`` holds it.

    ``extend_seconds`` renews the lease from the database's now. Raises
    :class:`LeaseLost` (changing nothing) when the lease expired or moved on.
    """
    if extend_seconds is not None:
        values["lease_expires_at"] = func.now() + _interval(extend_seconds)
    result = await session.execute(update(table).where(held(table, claim)).values(**values))
    if result.rowcount != 1:
        raise LeaseLost(f"lease on {table.name} {claim.key} generation {claim.generation} lost")


async def release(session: AsyncSession, table: Table, claim: Claim, **values: Any) -> None:
    """Apply ``values`` and free the lease at once; raises :class:`LeaseLost` if not held."""
    await fenced_update(
        session, table, claim, lease_owner=None, lease_token=None, lease_expires_at=None, **values
    )
