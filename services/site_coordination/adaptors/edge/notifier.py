"""Wakes long-polls when a stream changes (PostgreSQL LISTEN/NOTIFY).

Rows are the truth: a waiter also wakes on its timeout and looks again, so a
lost notification or a dropped LISTEN connection only delays a pull.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg
from sqlalchemy.engine import make_url

from site_coordination.adaptors.postgres_store import NOTIFY_CHANNEL
from site_coordination.domain.streams import StreamKey

log = logging.getLogger("site_coordination.edge")


class StreamNotifier:
    """One LISTEN connection per process; per-stream waiters."""

    def __init__(self, database_url: str) -> None:
        self.dsn = make_url(database_url).set(drivername="postgresql").render_as_string(
            hide_password=False)
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task | None = None
        self._stopping = False

    async def start(self) -> None:
        """Start the background LISTEN task (reconnects on failure until :meth:`stop`)."""
        self._stopping = False
        self._task = asyncio.create_task(self._listen(), name="site-edge-listen")

    async def stop(self) -> None:
        """Stop the LISTEN task and wait for it; never raises."""
        self._stopping = True
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def _on_notify(self, _conn, _pid, _channel, payload: str) -> None:
        for event in self._waiters.get(payload, ()):
            event.set()

    async def _listen(self) -> None:
        while not self._stopping:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=10)
                try:
                    await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
                    while not self._stopping:
                        await asyncio.sleep(30)
                finally:
                    await conn.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 -- polling still works; only wake-ups are lost
                log.warning("stream LISTEN connection failed: %s", type(exc).__name__)
                await asyncio.sleep(2)

    async def wait(self, stream: StreamKey, timeout: float) -> None:
        """Return when ``stream`` is notified or after ``timeout`` seconds."""
        key = f"{stream.site_id}\x1f{stream.environment}"
        event = asyncio.Event()
        self._waiters.setdefault(key, set()).add(event)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    self._waiters.pop(key, None)
