"""Named fault points of the coordinator, so tests can kill it at every step.

The coordinator calls ``await fault("<point>")`` between its steps; in
production the hook does nothing. A test hook raises :class:`CoordinatorCrash`,
which leaves exactly the durable state a killed process leaves: an open
transaction rolls back, a committed claim keeps its lease until it expires.

Points: ``claimed``, ``branch-prepared`` (PrepareBranch answered, not saved),
``pinned`` (PrepareAction answered, not saved), ``launch-intent`` (intent saved,
LaunchRun not sent), ``launched`` (LaunchRun answered, not saved),
``cancelled`` (CancelRun answered, not saved), ``settled`` (a settle saved);
for a collection's children ``item-launch-intent``, ``item-launched`` and
``item-cancelled``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable


class CoordinatorCrash(BaseException):
    """Raised by a test hook to simulate the process dying (a BaseException: nothing swallows it)."""


FaultHook = Callable[[str], Awaitable[None]]


async def no_fault(point: str) -> None:
    """The production hook: nothing happens."""
    return
