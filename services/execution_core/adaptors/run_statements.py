"""The SQL of :class:`~execution_core.adaptors.run_store.SqlRunStore`, built once.

Phase constants reach PostgreSQL as literals, not bind parameters: asyncpg prepares
every statement, and after a few runs PostgreSQL may plan it once for any parameter
values — a plan that cannot use the partial index ``runs_due`` (``phase <>
'terminal'``), so the supervisor's claim and the admission counts scanned every Run
ever made, each pass (ADR 0011). The hot statements are built once with typed bind
parameters and run with parameter dicts (ADR 0013): building them per call cost more
than running them. ``w_*`` are condition parameters, ``v_*`` values.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import and_, bindparam, func, literal, select, update

from execution_core.adaptors.tables import attempts, runs, site_commands
from execution_core.domain.states import ATTEMPT_TERMINAL, PHASE_ACCEPTED, PHASE_TERMINAL
from metallo.persistence.leases import ClaimStatement
from metallo.persistence.prebuilt import set_clause

Row = dict[str, Any]

# Rendered into the SQL text (they are constants, never user input): see module doc.
ACCEPTED = literal(PHASE_ACCEPTED, literal_execute=True)
TERMINAL = literal(PHASE_TERMINAL, literal_execute=True)


def as_row(r) -> Row | None:
    """A result row as a plain dict (None stays None)."""
    return None if r is None else dict(r._mapping)


# Hot statements, built once (ADR 0013); ``w_*`` are their condition parameters.
NOW = select(func.now())
FIND_RUN = select(runs).where(runs.c.run_id == bindparam("w_run_id"))
FIND_RUN_FOR_UPDATE = FIND_RUN.with_for_update()
FIND_RUN_AT = select(runs, func.now().label("db_now")).where(
    runs.c.run_id == bindparam("w_run_id")
)
CURRENT_ATTEMPT = select(attempts).where(attempts.c.attempt_id == bindparam("w_attempt_id"))
WAKE_RUN = (
    update(runs)
    .where(runs.c.run_id == bindparam("w_run_id"), runs.c.phase != TERMINAL)
    .values(next_wake_at=func.now(), version=runs.c.version + 1, updated_at=func.now())
)
NOTE_WAITING = (
    update(runs)
    .where(
        runs.c.run_id == bindparam("w_run_id"),
        runs.c.phase != TERMINAL,
        runs.c.current_attempt_id == bindparam("w_attempt_id"),
    )
    .values(
        waiting_reason=bindparam("w_code"),
        waiting_command_id=bindparam("w_command_id"),
        next_wake_at=func.now(),
        version=runs.c.version + 1,
        updated_at=func.now(),
    )
)
CLEAR_WAITING = (
    update(runs)
    .where(
        runs.c.run_id == bindparam("w_run_id"),
        runs.c.waiting_command_id == bindparam("w_command_id"),
    )
    .values(waiting_reason="", waiting_command_id=None)
)
ATTEMPTS_OF = (
    select(attempts).where(attempts.c.run_id == bindparam("w_run_id")).order_by(attempts.c.number)
)
COMMANDS_OF = (
    select(site_commands)
    .where(site_commands.c.attempt_id == bindparam("w_attempt_id"))
    .order_by(site_commands.c.seq)
)
NOTE_NATIVE_END = (
    update(attempts)
    .where(
        attempts.c.attempt_id == bindparam("w_attempt_id"),
        attempts.c.native_end_noticed_at.is_(None),
        attempts.c.state.not_in(sorted(ATTEMPT_TERMINAL)),
    )
    .values(
        native_end_noticed_at=func.now(),
        # Command order, not the clock, tells which observes came after (ADR 0016).
        native_end_noticed_after_seq=(
            select(func.coalesce(func.max(site_commands.c.seq), 0))
            .where(site_commands.c.attempt_id == bindparam("w_attempt_id"))
            .scalar_subquery()
        ),
    )
    .returning(attempts.c.run_id)
)
FIND_COMMAND = select(site_commands).where(site_commands.c.command_id == bindparam("w_command_id"))
FIND_COMMAND_FOR_UPDATE = FIND_COMMAND.with_for_update()
PLANNING = ClaimStatement(
    runs,
    ready=and_(runs.c.phase == ACCEPTED, runs.c.next_wake_at <= func.now()),
    order_by=runs.c.next_wake_at,
)
SUPERVISION = ClaimStatement(
    runs,
    ready=and_(
        runs.c.phase != ACCEPTED,
        runs.c.phase != TERMINAL,
        runs.c.next_wake_at <= func.now(),
    ),
    order_by=runs.c.next_wake_at,
)
#: Columns update_run sets itself (the lease ones only when it releases).
RUN_BOOKKEEPING = ("version", "updated_at")
LEASE = ("lease_owner", "lease_token", "lease_expires_at")


@lru_cache(maxsize=256)
def update_run_statement(keys: tuple[str, ...], fenced: bool, release: bool):
    cond = and_(runs.c.run_id == bindparam("w_run_id"), runs.c.version == bindparam("w_version"))
    if fenced:  # held(runs, claim) with the token as a parameter
        cond = and_(
            cond,
            runs.c.lease_token == bindparam("w_lease_token", type_=runs.c.lease_token.type),
            runs.c.lease_expires_at > func.now(),
        )
    values = {**set_clause(runs, keys), "version": runs.c.version + 1, "updated_at": func.now()}
    if release:
        values.update(lease_owner=None, lease_token=None, lease_expires_at=None)
    return update(runs).where(cond).values(**values)


@lru_cache(maxsize=256)
def update_attempt_statement(keys: tuple[str, ...]):
    return (
        update(attempts)
        .where(attempts.c.attempt_id == bindparam("w_attempt_id"))
        .values(**set_clause(attempts, keys))
    )


@lru_cache(maxsize=64)
def record_result_statement(keys: tuple[str, ...]):
    return (
        update(site_commands)
        .where(
            site_commands.c.command_id == bindparam("w_command_id"),
            site_commands.c.outcome.is_(None),
        )
        .values(result_at=func.now(), **set_clause(site_commands, keys))
    )
