"""Best-effort notices of an Attempt's native end to the Site edge (ADR 0016).

Execution Core learns that an Attempt's native work ended from the next ``observe``
it sends (1, 3, 7, 15, 31 s after the start), so a finished Run would hold its
admission slot, and a Pipeline's next step would wait, until then. An executor that
sees the end calls :meth:`NativeEndNotices.notice` once the terminal state is
committed to its journal; the notice asks the edge to have the next ``observe`` sent
at once. It is a hint, never evidence: the observe reports what happened.

A notice must never slow or break supervision or the command stream, so
:meth:`NativeEndNotices.notice` only schedules a background task: each send is
bounded by ``timeout_seconds``, its failures are logged (INFO; error type and code
only) and dropped, at most ``concurrency`` requests are open at once (the rest wait
their turn, so notices never take more than that share of the edge client's
connection pool from the command stream), at most ``max_in_flight`` notices wait or
run (more are dropped),
and an Attempt is noticed at most once per process (the last ``memory`` Attempt ids
are remembered). Lost notices cost only the old delay: the periodic observe still
comes.
"""

from __future__ import annotations

import asyncio
import logging

from site_runtime.application.ports import NativeEndNotice

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5.0
MEMORY = 10_000
MAX_IN_FLIGHT = 256
CONCURRENCY = 4  # open requests; the edge client's pool (100) serves the stream too


class NativeEndNotices:
    """Sends each Attempt's native-end notice once, in the background (module doc).
    With ``send`` None it does nothing."""

    def __init__(
        self,
        send: NativeEndNotice | None,
        *,
        timeout_seconds: float = TIMEOUT_SECONDS,
        memory: int = MEMORY,
        max_in_flight: int = MAX_IN_FLIGHT,
        concurrency: int = CONCURRENCY,
    ) -> None:
        if memory < 1 or max_in_flight < 1 or concurrency < 1:
            raise ValueError("memory, max_in_flight and concurrency must be at least 1")
        self.send = send
        self.timeout_seconds = timeout_seconds
        self.memory = memory
        self.max_in_flight = max_in_flight
        self._noticed: dict[str, None] = {}  # insertion-ordered: the oldest goes first
        self._tasks: set[asyncio.Task] = set()
        self._open = asyncio.Semaphore(concurrency)

    def noticed(self, attempt_id: str) -> bool:
        """Whether a notice for ``attempt_id`` was scheduled (and is still remembered)."""
        return attempt_id in self._noticed

    @property
    def in_flight(self) -> int:
        """Notices waiting for their turn or being sent now."""
        return len(self._tasks)

    def notice(self, attempt_id: str) -> None:
        """Schedule the notice for ``attempt_id`` unless it was scheduled already. Never
        raises, never waits; call it only after the end is committed to the journal."""
        if self.send is None or attempt_id in self._noticed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (a synchronous caller): the observe will tell
        if len(self._tasks) >= self.max_in_flight:
            log.info(
                "attempt %s: native-end notice dropped (%d in flight)", attempt_id, len(self._tasks)
            )
            return
        self._noticed[attempt_id] = None
        while len(self._noticed) > self.memory:
            del self._noticed[next(iter(self._noticed))]
        task = loop.create_task(self._send(attempt_id), name=f"native-end {attempt_id}")
        self._tasks.add(task)  # a reference, so the task is not collected mid-flight
        task.add_done_callback(self._tasks.discard)

    async def _send(self, attempt_id: str) -> None:
        assert self.send is not None
        try:
            async with self._open:  # the timeout starts once the request may go
                answer = await asyncio.wait_for(self.send(attempt_id), self.timeout_seconds)
        except TimeoutError:
            log.info(
                "attempt %s: native-end notice timed out after %.1f s",
                attempt_id,
                self.timeout_seconds,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - a hint: its failure changes nothing
            code = getattr(error, "code", None)
            log.info(
                "attempt %s: native-end notice failed (%s%s)",
                attempt_id,
                type(error).__name__,
                f" {code}" if isinstance(code, str) else "",
            )
        else:
            log.debug("attempt %s: native end noticed at the edge (%s)", attempt_id, answer)

    def cancel(self) -> None:
        """Cancel the notices still being sent (without waiting for them)."""
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        """Cancel the notices still being sent and wait until they are gone."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
