"""Named fault points of the workers, so tests can stop a worker at every step.

A worker calls ``await faults.at("<point>")`` between its steps; in production
the hook does nothing. Tests install a hook that raises :class:`WorkerCrash`,
which leaves exactly the durable state a killed process leaves (an open
transaction rolls back; a committed claim keeps its lease until it expires).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable


class WorkerCrash(BaseException):
    """Raised by a test hook to simulate the worker process dying at a point.

    A BaseException so the worker's own error handling does not swallow it.
    """


FaultHook = Callable[[str], Awaitable[None]]


async def no_fault(point: str) -> None:
    """The production hook: nothing happens."""
    return
