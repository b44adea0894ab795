"""Bounded request bodies for the Site edge (DESIGN.md: bounded inputs).

Pure ASGI middleware: a body above ``max_bytes`` gets 413 ``body-too-large``; JSON
nested deeper than ``max_depth`` gets 422 ``body-too-deep``; both before any
handler runs, so nothing changes — and both only once the caller is authenticated
(``check``): an unauthenticated caller gets its 401 instead, whatever it sent.

``POST /v1/commands/{sequence}/result`` alone may carry up to ``max_result_bytes``
(6 MiB): a ``read-log`` result holds up to 5 MiB of encoded log text (seed 001,
Private Run log commands), far above the general bound.
"""

from __future__ import annotations

import json
import logging
import re

from site_coordination.adaptors.edge.caller import CallerCheck, header, printable
from site_coordination.domain.canonical import json_depth_ok

log = logging.getLogger("site_coordination.edge")

RESULT_PATH = re.compile(r"^/v1/commands/[0-9]{1,19}/result$")
MAX_RESULT_BODY_BYTES = 6 * 1024 * 1024


async def _send_error(send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodyLimits:
    """Buffer and check each request body, then replay it to ``app``."""

    def __init__(self, app, *, max_bytes: int = 256 * 1024, max_depth: int = 32,
                 max_result_bytes: int = MAX_RESULT_BODY_BYTES,
                 check: CallerCheck | None = None) -> None:
        self.app = app
        self.check = check
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.max_result_bytes = max_result_bytes

    def _limit(self, scope) -> int:
        if scope.get("method") == "POST" and RESULT_PATH.match(scope.get("path", "")):
            return max(self.max_bytes, self.max_result_bytes)
        return self.max_bytes

    async def _refuse(self, scope, send, status: int, code: str, message: str) -> None:
        """Answer ``code`` — or the caller's 401 when it is not authenticated."""
        if self.check is not None:
            refused = await self.check(scope.get("path", ""), header(scope, b"authorization"))
            if refused is not None:
                status, code, message = refused.status, refused.code, refused.message
        log.info("refused %s %s: %s", scope["method"], printable(scope.get("path", "")), code)
        await _send_error(send, status, code, message)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._refuse(scope, send, 400, "malformed-request",
                                       "invalid Content-Length")
                    return
                if declared > limit:
                    await self._refuse(scope, send, 413, "body-too-large",
                                       f"request bodies are limited to {limit} bytes")
                    return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(scope, send, 413, "body-too-large",
                                   f"request bodies are limited to {limit} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body and not json_depth_ok(body, self.max_depth):
            await self._refuse(scope, send, 422, "body-too-deep",
                               f"JSON bodies may nest at most {self.max_depth} levels")
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
