"""Definite refusals of Site Coordination, each with a stable code (docs/site-edge.md).

Every refusal changes nothing: the use case raising it rolls its transaction back.
The edge maps ``status`` to the HTTP status; the command handler maps ``code``
to a ``Rejected`` reply.
"""

from __future__ import annotations


class Refusal(Exception):
    """A definite refusal: ``status`` (HTTP), stable ``code``, safe ``message``.

    ``reason`` is an optional finer code (e.g. the reason of an
    ``authorisation-refused``). Messages never carry secrets.
    """

    status: int = 400

    def __init__(self, code: str, message: str, *, reason: str | None = None,
                 status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        if status is not None:
            self.status = status


class Unauthenticated(Refusal):
    """401: no usable credential (missing, malformed, unknown, expired, revoked)."""

    status = 401


class Forbidden(Refusal):
    """403: a valid credential asking outside its stream, or an authority refusal."""

    status = 403


class NotFound(Refusal):
    """404: nothing with that name in the caller's stream."""

    status = 404


class Conflict(Refusal):
    """409: the request contradicts recorded state (result conflict, not delivered…)."""

    status = 409


class Invalid(Refusal):
    """422: well-formed JSON whose values break a rule."""

    status = 422
