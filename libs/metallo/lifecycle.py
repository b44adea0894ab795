"""Starting and stopping a service's parts in a fixed order (each service's wiring).

A service process runs several long-lived parts (outbox relay, command server,
event consumer, request client, workers). They start in dependency order — the
relay first, so replies and events can flow — and stop newest first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Part(Protocol):
    """Anything with ``start()`` and ``stop()`` coroutines."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Parts:
    """Starts the selected parts in order; :meth:`stop` stops those started, newest first."""

    def __init__(self) -> None:
        self._started: list[Part] = []

    async def start(self, order: Iterable[tuple[str, Part]], selected: Iterable[str]) -> None:
        """Start each ``(name, part)`` of ``order`` whose name is in ``selected``."""
        wanted = set(selected)
        for name, part in order:
            if name in wanted:
                await part.start()
                self._started.append(part)

    async def stop(self) -> None:
        """Stop what was started, newest first (a part that fails to start is not stopped)."""
        while self._started:
            await self._started.pop().stop()
