"""The Site Runtime worker: one per Site stream (docs/site-runtime.md, How a command is
handled).

For each command: pull it from the Site edge → journal it in ``delivery.sqlite``
BEFORE acting → dispatch it by ``kind`` to the executor's method of the family Protocol it implements
(:func:`~site_runtime.application.ports.command_handlers`) → save the exact result in
the journal BEFORE reporting it → record it at the edge → mark it acknowledged.
Recording a result also asks for the stream's next command (``next_wait``), which
the edge hands out with its answer; the worker then takes that one instead of
pulling, and journals it BEFORE acting exactly like a pulled one. Until journaled it
lives only in memory: after a restart the edge hands out the same command again
(it has no result), so nothing is lost.

After a restart a command whose result was saved is replayed (recorded again; the
edge treats an identical result as already recorded), and a command that was
journaled before the restart without a saved result goes to
``executor.recover(command)``, which finishes it without a second native effect
(docs/site-runtime.md, Recovery).

``Deferred(code)`` from the executor is not a result: the worker reports the code
once per command and code (``POST /v1/commands/{sequence}/progress``), keeps the
command pending and backs off. An unreachable edge is retried with a bounded
exponential delay.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from site_runtime.application.delivery import (
    DeliveryJournal,
    EdgePort,
    EdgeRefused,
    EdgeUnavailable,
    JournalEntry,
)
from site_runtime.application.ports import (
    CommandResult,
    Deferred,
    SiteCommand,
    SiteExecutor,
    command_handlers,
)
from site_runtime.domain.deferrals import is_catalogued

log = logging.getLogger("site_runtime.worker")


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 text (docs/site-commands.md)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Backoff:
    """Bounded exponential delay in seconds: ``initial`` doubling up to ``maximum``."""

    initial: float = 0.5
    maximum: float = 30.0
    _next: float = 0.0

    def next(self) -> float:
        """The delay to wait now (seconds); the following one doubles, up to ``maximum``."""
        delay = self._next or self.initial
        self._next = min(delay * 2, self.maximum)
        return delay

    def reset(self) -> None:
        """Start again from ``initial`` (after a success)."""
        self._next = 0.0


@dataclass
class WorkerSettings:
    """``wait_seconds``: long-poll wait per pull (0..30). Delays are in seconds."""

    wait_seconds: float = 20.0
    #: How long a result report waits for the next command (0..30 s). 0: take it only
    #: when one is already waiting; otherwise the following step long-polls with GET.
    next_wait_seconds: float = 0.0
    edge_backoff_initial: float = 0.5
    edge_backoff_maximum: float = 30.0
    deferral_backoff_initial: float = 1.0
    deferral_backoff_maximum: float = 30.0


class Worker:
    """Delivers the commands of one stream to one executor (see module doc).

    ``fault(step)`` is called at each journal step (``journaled``, ``dispatched``,
    ``executed``, ``result-saved``, ``reported``, and ``next-handed`` when the edge
    handed out the next command with a result's answer, before it is journaled); the
    default does nothing and tests use it to stop the worker at exactly that point,
    as a kill would.
    """

    def __init__(
        self,
        edge: EdgePort,
        journal: DeliveryJournal,
        executor: SiteExecutor,
        settings: WorkerSettings | None = None,
        fault: Callable[[str], None] = lambda step: None,
    ) -> None:
        self.edge = edge
        self.journal = journal
        self.executor = executor
        # command kind -> the executor's method, by the family Protocols it implements.
        self._handlers = command_handlers(executor)
        self.settings = settings or WorkerSettings()
        self.fault = fault
        self._dispatched_here: set[int] = set()
        # The next command the edge handed out with the last result's answer; not yet
        # journaled, so it is only taken by the next step, which journals it first.
        self._handed: SiteCommand | None = None
        # Commands journaled before this process started and still without a result:
        # whatever was done for them is uncertain, so they go to executor.recover.
        self._uncertain = {e.sequence for e in journal.unfinished() if e.result_json is None}
        s = self.settings
        self._edge_backoff = Backoff(s.edge_backoff_initial, s.edge_backoff_maximum)
        self._deferral_backoff = Backoff(s.deferral_backoff_initial, s.deferral_backoff_maximum)
        self._retry_after: float | None = None  # the last deferral's hint (seconds)

    # ------------------------------------------------------------------ loop
    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set (graceful: the current command finishes first).

        Raises :class:`~site_runtime.application.delivery.JournalMismatch` when the
        edge and the journal disagree about a sequence (the worker must not guess).
        """
        log.info("worker started")
        while not stop.is_set():
            try:
                delay = await self.step(stop)
                self._edge_backoff.reset()
            except EdgeUnavailable as error:
                delay = self._edge_backoff.next()
                log.warning("Site edge unreachable (%s); retrying in %.1f s", error, delay)
            except EdgeRefused as error:
                # 401/403: the grant is expired, revoked or for another stream. Only an
                # operator can fix that; keep trying slowly and say so.
                delay = self._edge_backoff.next()
                log.error(
                    "Site edge refused the Runtime (HTTP %s %s); retrying in %.1f s",
                    error.status,
                    error.code,
                    delay,
                )
            if delay:
                await _sleep_or_stop(stop, delay)
        log.info("worker stopped")

    async def step(self, stop: asyncio.Event | None = None) -> float:
        """Handle at most one pulled command; return how long to wait before the next
        step (seconds, 0 for none)."""
        for entry in self.journal.unfinished():
            if entry.state == "resulted" and entry.result_json is not None:
                await self._report(entry, entry.result_json)
        command, self._handed = self._handed, None
        if command is None:
            command = await self._pull(stop)
        if command is None:
            # Nothing within the long-poll wait; a short wait must not become a busy loop.
            return max(0.0, 0.5 - self.settings.wait_seconds)
        entry = self.journal.journal(command)
        self.fault("journaled")
        if entry.result_json is None:
            result = await self._execute(entry)
            if result is None:
                delay = self._deferral_backoff.next()
                hint, self._retry_after = self._retry_after, None
                return delay if hint is None else min(delay, hint)
            self._deferral_backoff.reset()
            result_json = self.journal.save_result(entry.sequence, canonical_json(result.to_json()))
            self.fault("result-saved")
        else:
            result_json = entry.result_json
            log.info(
                "command %s (%s): replaying its saved result", entry.sequence, entry.command.kind
            )
        await self._report(entry, result_json)
        return 0.0

    # ------------------------------------------------------------------ steps
    async def _pull(self, stop: asyncio.Event | None) -> SiteCommand | None:
        pull = asyncio.ensure_future(self.edge.next_command(self.settings.wait_seconds))
        if stop is None:
            return await pull
        stopped = asyncio.ensure_future(stop.wait())
        try:
            done, _ = await asyncio.wait({pull, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if pull in done:
            return pull.result()
        # Stopping: a pull has no effect at the edge, so it is safe to abandon.
        pull.cancel()
        try:
            await pull
        except (asyncio.CancelledError, EdgeUnavailable, EdgeRefused):
            log.debug("pull abandoned for the stop")
        return None

    async def _execute(self, entry: JournalEntry) -> CommandResult | None:
        command = entry.command
        recovering = (
            entry.sequence in self._uncertain and entry.sequence not in self._dispatched_here
        )
        self.journal.mark_dispatched(entry.sequence)
        self._dispatched_here.add(entry.sequence)
        self.fault("dispatched")
        try:
            if recovering:
                log.info(
                    "command %s (%s): journaled before a restart without a result; recovering",
                    entry.sequence,
                    command.kind,
                )
                result = await self.executor.recover(command)
            else:
                result = await self._dispatch(command)
        except Deferred as deferral:
            self._retry_after = deferral.retry_after
            await self._deferred(entry, deferral)
            return None
        except Exception as error:  # noqa: BLE001 - logged by type only (may hold native detail)
            log.error(
                "command %s (%s): runtime-error (%s); it stays pending",
                entry.sequence,
                command.kind,
                type(error).__name__,
            )
            return None
        self.fault("executed")
        if result.command_id != command.command_id:
            log.error(
                "command %s (%s): runtime-error (result for another command); it stays pending",
                entry.sequence,
                command.kind,
            )
            return None
        return result

    async def _dispatch(self, command: SiteCommand) -> CommandResult:
        handler = self._handlers.get(command.kind)
        if handler is None:
            return CommandResult(
                command.command_id,
                "refused",
                "unsupported-command-kind",
                f"this Runtime does not execute {command.kind!r} commands",
            )
        return await handler(command)

    async def _deferred(self, entry: JournalEntry, deferral: Deferred) -> None:
        code = deferral.code
        if not is_catalogued(code):
            log.error(
                "command %s (%s): runtime-error (uncatalogued deferral); it stays pending",
                entry.sequence,
                entry.command.kind,
            )
            return
        log.info("command %s (%s) deferred: %s", entry.sequence, entry.command.kind, code)
        current = self.journal.entry(entry.sequence)
        if current is not None and code in current.reported_codes:
            return
        try:
            await self.edge.report_progress(entry.sequence, entry.command.command_id, code)
        except (EdgeUnavailable, EdgeRefused) as error:
            # Best effort: the command stays pending either way and the report
            # is sent again with the next deferral.
            log.warning(
                "progress report for command %s not accepted (%s)",
                entry.sequence,
                type(error).__name__,
            )
            return
        self.journal.progress_reported(entry.sequence, code)

    async def _report(self, entry: JournalEntry, result_json: str) -> None:
        try:
            recorded, handed = await self.edge.record_result_and_next(
                entry.sequence, json.loads(result_json), self.settings.next_wait_seconds
            )
        except EdgeRefused as error:
            if error.code == "result-conflict":
                log.error(
                    "command %s (%s): the edge holds a different result; kept in the "
                    "journal as a conflict",
                    entry.sequence,
                    entry.command.kind,
                )
                self.journal.mark_conflict(entry.sequence)
                return
            raise
        self.fault("reported")
        self.journal.mark_acknowledged(entry.sequence, recorded)
        log.info(
            "command %s (%s): result %s",
            entry.sequence,
            entry.command.kind,
            "recorded" if recorded else "already recorded",
        )
        if handed is not None:
            self._handed = handed
            self.fault("next-handed")


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass
