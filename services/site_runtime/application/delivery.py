"""Ports of command delivery: the Site edge and the delivery journal (docs/site-runtime.md,
How a command is handled). The worker (``application/worker.py``) uses them;
``adaptors/edge/client.py`` and ``adaptors/delivery_journal.py`` implement them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from site_runtime.application.ports import SiteCommand


class EdgeUnavailable(Exception):
    """The Site edge could not be reached or answered with a server error (5xx, a
    transport failure, an unreadable credential file). Nothing is known to have
    changed; retry later. ``code`` is a catalogued deferral code for executors
    that turn it into a :class:`~site_runtime.application.ports.Deferred`.
    """

    def __init__(self, message: str, code: str = "site-edge-unreachable") -> None:
        super().__init__(message)
        self.code = code


class EdgeRefused(Exception):
    """The Site edge definitely refused the request (4xx) with a stable ``code``
    (and, for ``authorisation-refused``, a ``reason`` code). Never carries secrets.
    """

    def __init__(self, status: int, code: str, message: str, reason: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.reason = reason


class EdgePort(Protocol):
    """The command routes of the Site edge (preamble, Site edge routes)."""

    async def next_command(self, wait_seconds: float) -> SiteCommand | None:
        """The next command of the stream, or None when none arrives within
        ``wait_seconds`` (0..30). Raises EdgeUnavailable / EdgeRefused."""
        ...

    async def record_result(self, sequence: int, result: dict[str, Any]) -> bool:
        """Record ``result``; True when newly recorded, False when the identical result
        was already recorded. Raises EdgeRefused ``result-conflict`` when another
        result was recorded, EdgeUnavailable when the edge cannot answer."""
        ...

    async def record_result_and_next(
        self, sequence: int, result: dict[str, Any], next_wait: float = 0.0
    ) -> tuple[bool, SiteCommand | None]:
        """As :meth:`record_result`, and also the stream's next command handed out with
        the answer (``next_wait`` 0..30 seconds to wait for one), or None. The next
        command is delivered at the edge but NOT journaled: the caller journals it
        before acting, exactly as a pulled one. Raises as :meth:`record_result`."""
        ...

    async def report_progress(self, sequence: int, command_id: str, code: str) -> None:
        """Report a deferral code for a pending command (best effort for the caller)."""
        ...


@dataclass(frozen=True)
class JournalEntry:
    """One journaled command and what the Runtime knows of it.

    ``state``: ``journaled`` (saved, executor not yet called), ``dispatched``
    (executor called, no result saved), ``resulted`` (exact result saved, not yet
    recorded at the edge), ``acknowledged`` (recorded at the edge), ``conflict``
    (the edge holds a different result; kept for the operator).
    ``result_json`` is the exact canonical JSON text reported at the edge.
    """

    sequence: int
    command: SiteCommand
    state: str
    result_json: str | None
    reported_codes: frozenset[str]


class JournalMismatch(Exception):
    """The edge delivered a different command for a sequence the journal already
    holds: the journal belongs to another stream or the stream was reset. The
    worker stops; an operator must look (docs/site-runtime.md, Recovery)."""


class DeliveryJournal(Protocol):
    """The Runtime's private delivery journal (``delivery.sqlite``)."""

    def entry(self, sequence: int) -> JournalEntry | None:
        """The journaled command with this sequence, if any."""
        ...

    def unfinished(self) -> list[JournalEntry]:
        """Entries not yet acknowledged or in conflict, oldest first."""
        ...

    def journal(self, command: SiteCommand) -> JournalEntry:
        """Save ``command`` (state ``journaled``) unless already saved; return the entry.
        Raises JournalMismatch when the sequence holds another command_id."""
        ...

    def mark_dispatched(self, sequence: int) -> None:
        """The executor is about to act on the command."""
        ...

    def save_result(self, sequence: int, result_json: str) -> str:
        """Save the exact result (first one wins); return the saved text."""
        ...

    def mark_acknowledged(self, sequence: int, recorded: bool) -> None:
        """The edge holds the saved result (``recorded`` False: it already had it)."""
        ...

    def mark_conflict(self, sequence: int) -> None:
        """The edge holds a different result for the command."""
        ...

    def progress_reported(self, sequence: int, code: str) -> None:
        """The edge accepted a progress report with ``code`` for the command."""
        ...
