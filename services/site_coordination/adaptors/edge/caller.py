"""Who is asking, settled before anything about the request is judged
(docs/site-edge.md, Authentication first).

A request the edge refuses before its handler runs — a malformed or invalid body,
path or query, a body too large or too deep — is answered only after its caller is
authenticated: an unauthenticated caller gets the 401 and learns nothing of the
routes' schemas or limits. The happy path pays nothing extra: its handler
authenticates in its own transaction, as before.

:func:`printable` is how a request path (which may hold any decoded byte, ``%00``
included) enters a log line.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.application.grants import authenticate
from site_coordination.domain.errors import Refusal

#: Paths whose routes need a ``psb_`` command grant.
AUTHENTICATED_PREFIX = "/v1/"

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\\\u2028\u2029]")


def printable(text: str, limit: int = 300) -> str:
    """``text`` for a log line: control characters (C0, DEL, C1, the Unicode line and
    paragraph separators) and backslashes as ``\\xNN``/``\\uNNNN`` escapes, cut to
    ``limit`` characters (``…`` marks a cut). One request can never write two lines
    or forge another line's start."""
    cut = text[:limit]
    escaped = _UNPRINTABLE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
        else f"\\u{ord(m.group()):04x}", cut)
    return escaped + ("…" if len(text) > limit else "")


@dataclass(frozen=True)
class CallerRefused:
    """Why the caller is not authenticated: HTTP status, stable code, safe message."""

    status: int
    code: str
    message: str


#: ``check(path, authorization header)``: None when the caller may be told more.
CallerCheck = Callable[[str, str | None], Awaitable[CallerRefused | None]]


def caller_check(sessions: async_sessionmaker[AsyncSession]) -> CallerCheck:
    """A :data:`CallerCheck` reading the command grant afresh (its own short
    transaction, nothing written). Paths outside :data:`AUTHENTICATED_PREFIX` pass."""

    async def check(path: str, authorization: str | None) -> CallerRefused | None:
        if not path.startswith(AUTHENTICATED_PREFIX):
            return None
        try:
            async with sessions() as session, session.begin():
                await authenticate(PostgresSiteStore(session), authorization)
        except Refusal as exc:
            return CallerRefused(exc.status, exc.code, exc.message)
        return None

    return check


def header(scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower-case bytes) in an ASGI scope."""
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None
