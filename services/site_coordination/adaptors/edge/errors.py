"""How the Site edge answers refusals and faults (docs/site-edge.md, Errors).

Every answer is ``{"error": {"code", "message"[, "reason"]}}``; every refusal is
logged with its code and the request path made :func:`printable`, never a secret.
A request refused for its own shape (body, path or query) is answered only after
its caller is authenticated (:mod:`site_coordination.adaptors.edge.caller`).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from site_coordination.adaptors.edge.caller import CallerCheck, printable
from site_coordination.application.ports import AuthorityUnavailable, IdentityProviderUnavailable
from site_coordination.domain.errors import Refusal

log = logging.getLogger("site_coordination.edge")


def error_response(status: int, code: str, message: str,
                   reason: str | None = None) -> JSONResponse:
    """The edge's error body with ``status``."""
    detail: dict[str, Any] = {"code": code, "message": message}
    if reason:
        detail["reason"] = reason
    return JSONResponse({"error": detail}, status_code=status)


def _where(request: Request) -> str:
    return f"{request.method} {printable(request.scope.get('path', ''))}"


def install_error_handlers(app: FastAPI, check: CallerCheck | None) -> None:
    """Register the edge's exception handlers on ``app``; ``check`` (None only when
    the app just renders its OpenAPI document) authenticates the caller of a
    request refused for its shape."""

    @app.exception_handler(Refusal)
    async def refusal(request: Request, exc: Refusal) -> JSONResponse:
        log.info("refused %s: %s%s", _where(request), exc.code,
                 f" ({exc.reason})" if exc.reason else "")
        return error_response(exc.status, exc.code, exc.message, exc.reason)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        if check is not None:
            refused = await check(request.scope.get("path", ""),
                                  request.headers.get("authorization"))
            if refused is not None:
                log.info("refused %s: %s", _where(request), refused.code)
                return error_response(refused.status, refused.code, refused.message)
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            log.info("refused %s: malformed-json", _where(request))
            return error_response(400, "malformed-json", "the body is not valid JSON")
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        log.info("refused %s: invalid-request at %s", _where(request), printable(where))
        return error_response(422, "invalid-request", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(AuthorityUnavailable)
    async def authority_down(request: Request, exc: AuthorityUnavailable) -> JSONResponse:
        log.warning("authority unavailable for %s", _where(request))
        return error_response(503, "authority-unavailable",
                              "current Project authority cannot be confirmed")

    @app.exception_handler(IdentityProviderUnavailable)
    async def idp_down(request: Request, exc: IdentityProviderUnavailable) -> JSONResponse:
        log.warning("identity provider unavailable for %s", _where(request))
        return error_response(503, "identity-provider-unavailable",
                              "the member token cannot be issued now")

    @app.exception_handler(DBAPIError)
    async def storage_error(request: Request, exc: DBAPIError) -> JSONResponse:
        if not exc.connection_invalidated:
            raise exc  # a real fault: a 500, logged by the server
        log.warning("database connection lost during %s", _where(request))
        return error_response(503, "storage-unavailable",
                              "the database connection was lost; retry")

    @app.exception_handler(OSError)
    async def storage_down(request: Request, exc: OSError) -> JSONResponse:
        log.warning("database unreachable during %s: %s", _where(request), type(exc).__name__)
        return error_response(503, "storage-unavailable", "the database cannot be reached; retry")
