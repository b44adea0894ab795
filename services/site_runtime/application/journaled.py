"""The prologue every executor's commands share (docs/site-runtime.md, Recovery).

Before an executor's own handler runs, :class:`JournaledExecutor` applies the
rule of the command's kind (:data:`COMMAND_RULES`):

* **replay** — a result the executor's journal saved for the same command id is
  returned as it is, so a command handled again (a restart, a replay) never makes
  a second native effect;
* **lock** — the handler runs holding the Attempt's lock, so two commands of one
  Attempt never interleave (``read-log`` takes none: a read never waits behind an
  Attempt being advanced);
* **attempt-not-prepared** — a command that needs the Attempt is refused when
  the executor's journal has none (nothing native is touched). A stop
  (``cancel``, ``terminate``) needs it too: a Runtime that does not know an
  Attempt cannot vouch that its native work stopped, so it never closes the stop;
  Execution Core asks again and ends the Attempt ``lost`` after its
  reconciliation period.

``recover`` (a command journaled as in flight before a restart) is the same
path: every handler is idempotent by the executor's journal, so recovering a
command is handling it again under these rules. A kind the executor has no
handler for is refused ``unsupported-command-kind``.

An executor builds one wrapper over its journal and its handlers (:func:`handlers_of`:
its ``_prepare``, ``_start``... methods), and its public methods call
:meth:`JournaledExecutor.run`::

    self.commands = JournaledExecutor(journal, handlers_of(self))

    async def prepare(self, command):
        return await self.commands.run("prepare", command)

A handler that must release the lock part-way (the local executor's ``observe``
starts waiting Attempts, which takes their locks) is named in ``unlocked`` and
takes :meth:`JournaledExecutor.lock` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from site_runtime.application.ports import CommandHandler, CommandResult, SiteCommand

NOT_PREPARED = "the Attempt was not prepared at this Runtime"


class CommandJournal(Protocol):
    """What the wrapper reads from an executor's own journal (``jobs.sqlite``)."""

    def result(self, command_id: str) -> dict[str, Any] | None:
        """The saved exact result of ``command_id`` (``CommandResult`` fields), or None."""
        ...

    def attempt(self, attempt_id: str) -> object | None:
        """The journaled Attempt, or None when this Runtime never prepared it."""
        ...


@dataclass(frozen=True)
class CommandRule:
    """How the prologue treats one command kind (see the module doc)."""

    replays: bool
    locks: bool
    needs_attempt: bool


#: command kind -> its prologue rule (both families; docs/site-commands.md).
COMMAND_RULES: Mapping[str, CommandRule] = {
    "prepare": CommandRule(replays=True, locks=True, needs_attempt=False),
    "start": CommandRule(replays=True, locks=True, needs_attempt=True),
    # Every task's Attempt is checked by the handler (the refusal names the task).
    "start-array": CommandRule(replays=True, locks=True, needs_attempt=False),
    "observe": CommandRule(replays=False, locks=True, needs_attempt=True),
    "cancel": CommandRule(replays=True, locks=True, needs_attempt=True),
    "read-log": CommandRule(replays=False, locks=False, needs_attempt=True),
    "apply": CommandRule(replays=True, locks=True, needs_attempt=False),
    "terminate": CommandRule(replays=True, locks=True, needs_attempt=True),
}


#: The queued-batch family's command kinds (docs/site-commands.md).
QUEUED_BATCH = ("prepare", "start", "observe", "cancel", "read-log")
MATERIAL_CHANGED = "the Attempt was prepared with other material"


def handlers_of(owner: object, kinds: Collection[str] = QUEUED_BATCH) -> dict[str, CommandHandler]:
    """``owner``'s handler of each of ``kinds``: its method ``_<kind>`` (``read-log``:
    ``_read_log``). Raises AttributeError at once when one is missing."""
    return {kind: getattr(owner, "_" + kind.replace("-", "_")) for kind in kinds}


def material_changed(saved: Mapping[str, Any] | None, payload: Mapping[str, Any]) -> bool:
    """True when a prepare's ``payload`` differs from the material the Attempt was
    journalled with (``saved``; None: never prepared here) — refused
    ``material-changed`` with :data:`MATERIAL_CHANGED`, nothing touched."""
    return saved is not None and dict(saved) != dict(payload)


def refused(command: SiteCommand, code: str, message: str) -> CommandResult:
    """A definite refusal of ``command`` with ``code`` (nothing native was touched)."""
    return CommandResult(command.command_id, "refused", code, message)


class JournaledExecutor:
    """Runs an executor's handlers under the shared prologue (see the module doc).

    ``handlers`` maps a command kind to the executor's handler for it; ``unlocked``
    names kinds whose handler takes :meth:`lock` itself.
    """

    def __init__(
        self,
        journal: CommandJournal,
        handlers: Mapping[str, CommandHandler],
        *,
        unlocked: Collection[str] = (),
    ) -> None:
        self.journal = journal
        self.handlers = dict(handlers)
        self.unlocked = frozenset(unlocked)
        self._locks: dict[str, asyncio.Lock] = {}

    def lock(self, attempt_id: str) -> asyncio.Lock:
        """The one lock of ``attempt_id`` (the same object for every caller)."""
        return self._locks.setdefault(attempt_id, asyncio.Lock())

    async def run(self, kind: str, command: SiteCommand) -> CommandResult:
        """Handle ``command`` as a ``kind`` command: replay, lock, Attempt check, handler.

        Raises whatever the handler raises (``Deferred`` keeps the command pending).
        """
        handler = self.handlers.get(kind)
        rule = COMMAND_RULES.get(kind)
        if handler is None or rule is None:
            return refused(
                command,
                "unsupported-command-kind",
                f"this executor does not execute {kind!r} commands",
            )
        if rule.replays:
            saved = self.journal.result(command.command_id)
            if saved is not None:
                return CommandResult(**saved)
        if not rule.locks or kind in self.unlocked:
            return await self._checked(rule, handler, command)
        async with self.lock(command.attempt_id):
            return await self._checked(rule, handler, command)

    async def recover(self, command: SiteCommand) -> CommandResult:
        """Finish a command journaled as in flight before a restart: handled again
        under its own kind's rule (every handler is idempotent by the journal)."""
        return await self.run(command.kind, command)

    async def _checked(
        self, rule: CommandRule, handler: CommandHandler, command: SiteCommand
    ) -> CommandResult:
        if rule.needs_attempt and self.journal.attempt(command.attempt_id) is None:
            return refused(command, "attempt-not-prepared", NOT_PREPARED)
        return await handler(command)
