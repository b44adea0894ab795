"""Errors of the messaging layer (DESIGN.md, Messaging)."""

from __future__ import annotations


class Rejected(Exception):
    """A definite refusal with a stable code (e.g. ``permission-denied``).

    Raised by command and query handlers to refuse; the refusal is saved for the
    command_id and replied. A ``transient`` refusal (a dependency is unavailable
    right now) is replied but not saved, so a retry with the same command_id is
    decided afresh. Raised by :class:`RequestClient` when the reply is a
    rejection. ``details`` is a flat string map carried in the reply.
    """

    def __init__(
        self, code: str, message: str = "", details: dict[str, str] | None = None, *, transient: bool = False
    ):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.details = dict(details or {})
        self.transient = transient


class OutcomeUncertain(Exception):
    """No reply arrived in time: the command may or may not have been applied.

    Retrying with the same command_id is safe: the owner returns the saved outcome.
    """


class PoisonMessage(Exception):
    """A delivery that can never be processed (unknown type, wrong version, bad body).

    It is dead-lettered at once with ``reason``; it is never retried.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
