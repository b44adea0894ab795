"""Readiness checks: is this process safe to serve writes right now?

A check is an async callable returning ``None`` when ready, else a short reason
for operators (never a secret: URLs are not included). :class:`Readiness` runs
every check concurrently, each bounded by ``timeout`` seconds (a check that does
not answer in time is not ready).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

Check = Callable[[], Awaitable[str | None]]


class Attachable(Protocol):
    """A queue consumer that can say whether it is subscribed (QueueConsumer)."""

    queue_name: str

    async def connected(self, timeout: float = 2.0) -> bool: ...

    async def attached(self, timeout: float = 2.0) -> bool: ...


@dataclass
class Readiness:
    """Named checks of one process; :meth:`evaluate` runs them."""

    checks: dict[str, Check] = field(default_factory=dict)
    timeout: float = 3.0

    def add(self, name: str, check: Check) -> None:
        """Register ``check`` under ``name`` (e.g. ``database``); names are unique."""
        if name in self.checks:
            raise ValueError(f"readiness check {name!r} is registered twice")
        self.checks[name] = check

    async def evaluate(self) -> tuple[bool, dict[str, str]]:
        """(ready, {name: "ok" or the reason}); ready only when every check is ok."""
        names = list(self.checks)
        results = await asyncio.gather(*(self._run(self.checks[n]) for n in names))
        report = {n: r or "ok" for n, r in zip(names, results, strict=True)}
        return all(r is None for r in results), report

    async def _run(self, check: Check) -> str | None:
        try:
            return await asyncio.wait_for(check(), self.timeout)
        except TimeoutError:
            return f"no answer within {self.timeout:g} s"
        except Exception as error:  # a failing check is a reason, never a crash
            return f"{type(error).__name__}: {str(error)[:200]}"


def database_check(engine: AsyncEngine) -> Check:
    """Ready when ``SELECT 1`` runs on ``engine``."""
    async def check() -> str | None:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        return None
    return check


def migration_heads(migrations_dir: Path) -> set[str]:
    """The head revisions of the Alembic scripts in ``migrations_dir`` (reads files)."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir))
    return set(ScriptDirectory.from_config(config).get_heads())


def migrations_check(engine: AsyncEngine, migrations_dir: Path) -> Check:
    """Ready when the database's ``alembic_version`` is this code's head: a database
    migrated by a newer release, or not yet migrated, is not ready."""
    heads = migration_heads(migrations_dir)

    async def check() -> str | None:
        async with engine.connect() as connection:
            rows = await connection.execute(text("SELECT version_num FROM alembic_version"))
            current = {row[0] for row in rows}
        if current != heads:
            return f"database at {sorted(current) or 'no revision'}, code at {sorted(heads)}"
        return None
    return check


def consumers_check(consumers: Callable[[], Iterable[Attachable]]) -> Check:
    """Ready when there is at least one consumer and each is attached (its broker
    connection up, its queue consumed); the reason names the queues that are not."""
    async def check() -> str | None:
        found = list(consumers())
        if not found:
            return "no queue consumer started"
        states = await asyncio.gather(*(c.attached() for c in found))
        detached = [c.queue_name for c, ok in zip(found, states, strict=True) if not ok]
        return f"not consuming {', '.join(detached)}" if detached else None
    return check


def broker_check(consumers: Callable[[], Iterable[Attachable]]) -> Check:
    """Ready when every consumer's broker connection answers a ping."""
    async def check() -> str | None:
        found = list(consumers())
        if not found:
            return "not connected to RabbitMQ yet"
        states = await asyncio.gather(*(c.connected() for c in found))
        down = [c.queue_name for c, ok in zip(found, states, strict=True) if not ok]
        return f"RabbitMQ connection down for {', '.join(down)}" if down else None
    return check


def service_readiness(engine: AsyncEngine, migrations_dir: Path,
                      consumers: Callable[[], Iterable[Attachable]]) -> Readiness:
    """A service's checks: ``database`` reachable, ``migrations`` at head, ``broker``
    connected and ``consumers`` attached (docs/operators.md, Probes)."""
    readiness = Readiness()
    readiness.add("database", database_check(engine))
    readiness.add("migrations", migrations_check(engine, migrations_dir))
    readiness.add("broker", broker_check(consumers))
    readiness.add("consumers", consumers_check(consumers))
    return readiness


def started_check(started: asyncio.Event, reason: str) -> Check:
    """Ready once ``started`` is set (a worker that has begun its loop); else ``reason``."""
    async def check() -> str | None:
        return None if started.is_set() else reason
    return check
