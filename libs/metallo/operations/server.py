"""The operations HTTP server of one process (docs/operators.md, Probes and metrics).

- ``GET /healthz``: 200 ``{"status": "alive"}`` while the event loop answers;
- ``GET /readyz``: 200 when every readiness check is ok, else 503; the body names
  each check and its state (``{"ready": bool, "checks": {name: "ok" | reason}}``);
- ``GET /metrics``: the process's Prometheus metrics (text exposition format).

It listens on ``METALLO_OPS_ADDRESS`` (``host:port``; default ``127.0.0.1:0``, a
loopback port the system picks, logged at start). Plain HTTP: it is meant for the
loopback interface or a pod's own network, never for the Internet; it serves no
data of any Project.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket

import uvicorn
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from metallo.operations.metrics import AsyncCollector
from metallo.operations.readiness import Readiness

OPS_ADDRESS_ENV = "METALLO_OPS_ADDRESS"
DEFAULT_ADDRESS = "127.0.0.1:0"
log = logging.getLogger(__name__)


COLLECT_TIMEOUT_SECONDS = 5.0
SCRAPE_ERRORS = Counter("metallo_scrape_errors", "Database metrics that could not be read "
                        "at a scrape (the rest of the scrape is served)", ["service"])


class _Families:
    """A collector returning metric families read just now."""

    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


class _QuietServer(uvicorn.Server):
    """uvicorn without its own SIGINT/SIGTERM handling: the process's main loop owns
    the signals and stops this server with everything else."""

    def capture_signals(self):
        return contextlib.nullcontext()


def ops_address(environ: dict[str, str] | None = None) -> tuple[str, int]:
    """(host, port) from ``METALLO_OPS_ADDRESS``. Raises ValueError naming the variable
    when it is not ``host:port`` with a port in 0..65535."""
    raw = (environ if environ is not None else os.environ).get(OPS_ADDRESS_ENV) or DEFAULT_ADDRESS
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{OPS_ADDRESS_ENV}={raw!r} is not host:port (e.g. 127.0.0.1:9464)")
    return host.strip("[]"), int(port)


class OpsServer:
    """Serves ``/healthz``, ``/readyz`` and ``/metrics`` for one process (module doc)."""

    def __init__(self, name: str, readiness: Readiness, *, address: tuple[str, int] | None = None,
                 registry: CollectorRegistry = REGISTRY,
                 collectors: list[AsyncCollector] | None = None):
        self.name = name
        self.readiness = readiness
        self.registry = registry
        self.collectors = list(collectors or [])
        self.address = address or ops_address()
        self.port: int | None = None
        self._server: _QuietServer | None = None
        self._task: asyncio.Task | None = None
        self.app = Starlette(routes=[
            Route("/healthz", self._healthz), Route("/readyz", self._readyz),
            Route("/metrics", self._metrics)])

    async def _healthz(self, _request: Request) -> Response:
        return JSONResponse({"status": "alive", "service": self.name})

    async def _readyz(self, _request: Request) -> Response:
        ready, checks = await self.readiness.evaluate()
        return JSONResponse({"ready": ready, "service": self.name, "checks": checks},
                            status_code=200 if ready else 503)

    async def _metrics(self, _request: Request) -> Response:
        body = generate_latest(self.registry)
        families = []
        for collect in self.collectors:
            try:
                families.extend(await asyncio.wait_for(collect(), COLLECT_TIMEOUT_SECONDS))
            except Exception as error:  # one failing source must not hide the others
                SCRAPE_ERRORS.labels(self.name).inc()
                log.warning("%s: a metrics collector failed: %s", self.name, error)
        if families:
            scraped = CollectorRegistry(auto_describe=False)
            scraped.register(_Families(families))
            body += generate_latest(scraped)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def start(self) -> None:
        """Bind (raises OSError when the address is taken) and serve in the background."""
        host, port = self.address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            sock.close()
            raise OSError(f"{self.name}: cannot listen on {host}:{port} ({OPS_ADDRESS_ENV}): "
                          f"{error.strerror}") from error
        sock.listen(64)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = _QuietServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        log.info("%s: /healthz, /readyz and /metrics on http://%s:%d", self.name, host, self.port)

    async def stop(self) -> None:
        """Stop serving (open requests finish first)."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None
