"""HTTP request metrics for an ASGI app (the Site edge): ``metallo_http_requests_total``
and ``metallo_http_request_seconds`` by route template (``/v1/commands/{sequence}/result``,
never the concrete path), method and status class (2xx, 4xx, 5xx)."""

from __future__ import annotations

import time

from prometheus_client import Counter, Histogram

from metallo.operations.metrics import LATENCY_BUCKETS

HTTP_REQUESTS = Counter("metallo_http_requests", "HTTP requests the Site edge answered",
                        ["route", "method", "status"])
HTTP_SECONDS = Histogram("metallo_http_request_seconds", "Time to answer one Site edge "
                         "request (a long-poll includes its wait)", ["route", "method"],
                         buckets=LATENCY_BUCKETS)


class RequestMetrics:
    """ASGI middleware: counts and times each HTTP request of ``app`` (module doc).
    A path no route matched is counted as route ``unmatched``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope.get("method", "")
            HTTP_REQUESTS.labels(route, method, f"{status // 100}xx").inc()
            HTTP_SECONDS.labels(route, method).observe(time.perf_counter() - start)
