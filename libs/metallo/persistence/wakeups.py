"""Wake-ups from PostgreSQL NOTIFY (DESIGN.md, Persistence).

A worker that polls durable rows (:class:`~metallo.persistence.polling.PollingWorker`)
would otherwise notice new due work only after its idle wait. A transaction that
makes work due may ``NOTIFY`` a channel (often from a trigger, so no writer can
forget); PostgreSQL delivers it only after that transaction commits, so a woken
worker always finds the committed row. The rows stay the truth: a lost notification
(listener reconnecting, database restart) costs at most one poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import asyncpg
from sqlalchemy.engine import URL, make_url

log = logging.getLogger(__name__)


def driver_dsn(url: str | URL) -> str:
    """The asyncpg DSN (``postgresql://…``) of a SQLAlchemy URL such as ``postgresql+asyncpg://…``."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class WakeListener:
    """LISTENs on ``channel`` of the database at ``url`` and calls ``on_wake()`` for each
    notification, and once after every (re)connect (notifications sent while it was
    away are lost, so the callers look once more).

    ``on_wake`` must be quick and must not raise (it usually sets an event).
    With ``payload=True`` it is called with the notification's payload (a str;
    ``""`` for the look after a (re)connect, which must wake every kind of work),
    so one channel can wake only the worker a notification concerns.
    A failed connection is retried every ``retry_seconds`` (seconds); polling keeps
    the workers going meanwhile. Raises nothing from :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        url: str | URL,
        channel: str,
        on_wake: Callable[[], None] | Callable[[str], None],
        *,
        retry_seconds: float = 2.0,
        payload: bool = False,
    ) -> None:
        self.dsn = driver_dsn(url)
        self.channel = channel
        self.on_wake = on_wake
        self.payload = payload
        self.retry_seconds = retry_seconds
        self._task: asyncio.Task | None = None
        self.connected = asyncio.Event()

    async def start(self) -> None:
        """Listen in the background until :meth:`stop`."""
        self._task = asyncio.create_task(self._run(), name=f"listen {self.channel}")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.connected.clear()

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._wake(payload)

    def _wake(self, payload: str) -> None:
        if self.payload:
            self.on_wake(payload)  # type: ignore[call-arg]
        else:
            self.on_wake()  # type: ignore[call-arg]

    async def _run(self) -> None:
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=10)
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.warning("LISTEN %s: cannot connect (%s); retrying in %.0f s", self.channel, exc, self.retry_seconds)
                await asyncio.sleep(self.retry_seconds)
                continue
            closed = asyncio.Event()
            conn.add_termination_listener(lambda _conn, done=closed: done.set())
            try:
                await conn.add_listener(self.channel, self._notified)
                self.connected.set()
                self._wake("")  # anything made due while we were not listening
                await closed.wait()
                log.warning("LISTEN %s: connection lost; reconnecting", self.channel)
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("LISTEN %s failed (%s); reconnecting", self.channel, exc)
            finally:
                self.connected.clear()
                with contextlib.suppress(Exception):
                    await asyncio.shield(conn.close(timeout=2))
            await asyncio.sleep(self.retry_seconds)
