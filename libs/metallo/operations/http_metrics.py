"""Native request metrics for httpx clients (``metallo_native_request_seconds`` and
``metallo_native_request_errors_total``, labelled by a fixed ``target`` and the method;
never the URL)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

from metallo.operations.metrics import NATIVE_REQUEST_ERRORS, NATIVE_REQUEST_SECONDS

R = TypeVar("R")


async def timed_request(target: str, method: str, send: Callable[[], Awaitable[R]]) -> R:
    """``await send()`` timed as one native request of ``target``; a raised error or an
    answer whose ``status_code`` is 5xx counts as an error. Any client library's answer
    (httpx, httpx2) passes through unchanged."""
    start = time.perf_counter()
    try:
        response = await send()
    except Exception:
        NATIVE_REQUEST_ERRORS.labels(target, method).inc()
        raise
    finally:
        NATIVE_REQUEST_SECONDS.labels(target, method).observe(time.perf_counter() - start)
    if response.status_code >= 500:  # type: ignore[attr-defined]
        NATIVE_REQUEST_ERRORS.labels(target, method).inc()
    return response


class MeasuredTransport(httpx.AsyncBaseTransport):
    """Times every request sent through ``inner``; a transport error or an HTTP 5xx
    answer counts as an error. The answer is passed on unchanged."""

    def __init__(self, inner: httpx.AsyncBaseTransport, target: str):
        self.inner = inner
        self.target = target

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await timed_request(self.target, request.method,
                                   lambda: self.inner.handle_async_request(request))

    async def aclose(self) -> None:
        await self.inner.aclose()


def measure_client(client: httpx.AsyncClient, target: str) -> httpx.AsyncClient:
    """Route ``client``'s default transport through :class:`MeasuredTransport`.

    httpx has no public setter for a built client's transport; clients built by
    code we do not own are wrapped here, in one place.
    """
    inner = client._transport  # noqa: SLF001
    if not isinstance(inner, MeasuredTransport):
        client._transport = MeasuredTransport(inner, target)  # noqa: SLF001
    return client
