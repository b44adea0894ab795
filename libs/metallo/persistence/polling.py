"""A background loop of passes over durable work rows (DESIGN.md, Persistence).

Workers that claim rows with fenced leases (launch workers, supervisors) run
``run_once()`` pass after pass; a pass that found nothing due waits
``poll_seconds``, or less when :meth:`PollingWorker.wake` is called (a committed
transaction made work due: ``metallo.persistence.wakeups``) or the worker stops.
A worker with a ``claim_limit`` also waits after a pass that claimed fewer rows
than the limit: nothing more was due when it claimed, and whatever became due
since woke it (or waits for the poll, as after an idle pass). Without it, a busy
worker fed one row at a time spent one empty claim transaction after each row.
A failing pass is logged and the loop goes on: the rows, not the loop, hold the
state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod

log = logging.getLogger(__name__)


class PollingWorker(ABC):
    """Base class: subclasses set ``owner`` and implement ``run_once() -> int`` and
    ``poll_seconds`` (seconds to wait after an idle pass)."""

    owner: str = "worker"
    _task: asyncio.Task | None = None
    _stop: asyncio.Event | None = None
    _nudge: asyncio.Event | None = None

    @property
    @abstractmethod
    def poll_seconds(self) -> float:
        """Seconds to wait after a pass that found nothing due."""

    @property
    def claim_limit(self) -> int | None:
        """Rows one pass claims at most; None (the default): always pass again after
        a pass that worked something."""
        return None

    @abstractmethod
    async def run_once(self) -> int:
        """One pass; return how many items were worked (0 = idle)."""

    async def start(self) -> None:
        """Run passes in the background until :meth:`stop`."""
        self._stop = asyncio.Event()
        self._nudge = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name=self.owner)

    async def stop(self) -> None:
        """Stop after the current await; leases held expire on their own."""
        if self._stop is not None:
            self._stop.set()
        self.wake()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def wake(self) -> None:
        """End the current idle wait now (new work may be due); a no-op when not started."""
        if self._nudge is not None:
            self._nudge.set()

    async def _loop(self) -> None:
        assert self._stop is not None and self._nudge is not None
        while not self._stop.is_set():
            try:
                done = await self.run_once()
            except Exception:
                log.exception("%s: pass failed", self.owner)
                done = 0
            limit = self.claim_limit
            if done == 0 or (limit is not None and done < limit):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._nudge.wait(), self.poll_seconds)
                # Cleared before the next pass: a wake during that pass ends the next wait.
                self._nudge.clear()
