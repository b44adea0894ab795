"""Wrong answers from the Kubernetes API for one test: an HTTPS proxy to the lab that
replaces chosen answers.

The lab serves every engineer's tests, so it never answers wrongly on purpose;
instead a test's executor talks to the lab through :class:`FaultyApi`, which
forwards every request unchanged (the Runtime's token and impersonation headers
included) and, for a request matching an :meth:`FaultyApi.inject` rule, answers
``status``/``body`` instead — before the request reaches the lab (``forward=False``:
nothing happened) or after it did (``forward=True``: the effect exists, its answer
is lost). The proxy's TLS certificate comes from a test CA that
:meth:`FaultyApi.kubeconfig` names.
"""

from __future__ import annotations

import json
import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import trustme
from aiohttp import web
from ruamel.yaml import YAML

from tests.k8s.lab_clients import STATE

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}


@dataclass
class Rule:
    """Answer ``status``/``body`` to the next ``times`` requests matching ``method`` and
    the ``path`` regular expression (searched in the path and query)."""

    method: str
    path: str
    status: int
    body: bytes
    times: int
    forward: bool
    hits: int = 0


def status_body(status: int, reason: str, message: str) -> bytes:
    """A ``Status`` object as the API server sends it."""
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": status,
        }
    ).encode()


class FaultyApi:
    """``async with FaultyApi(tmp_path) as api``: ``api.inject(...)``, ``api.kubeconfig()``."""

    def __init__(self, work: Path) -> None:
        doc = YAML().load((STATE / "kubeconfig").read_text())
        self.upstream = doc["clusters"][0]["cluster"]["server"]
        self.work = work
        self.rules: list[Rule] = []
        self.requests: list[tuple[str, str]] = []
        self._ca = trustme.CA()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    def inject(
        self,
        method: str,
        path: str,
        status: int,
        body: bytes | None = None,
        *,
        times: int = 1,
        forward: bool = False,
    ) -> Rule:
        """Add a rule (see :class:`Rule`); ``body`` defaults to a ``Status`` for ``status``."""
        rule = Rule(
            method,
            path,
            status,
            body if body is not None else status_body(status, "InternalError", "injected"),
            times,
            forward,
        )
        self.rules.append(rule)
        return rule

    def _rule(self, request: web.Request) -> Rule | None:
        for rule in self.rules:
            if (
                rule.hits < rule.times
                and rule.method == request.method
                and re.search(rule.path, request.path_qs)
            ):
                rule.hits += 1
                return rule
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        rule = self._rule(request)
        if rule is not None and not rule.forward:
            return web.Response(status=rule.status, body=rule.body, content_type="application/json")
        assert self._session is not None
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_HEADERS]
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=await request.read(),
        ) as answer:
            body = await answer.read()
            if rule is not None:
                return web.Response(
                    status=rule.status, body=rule.body, content_type="application/json"
                )
            return web.Response(
                status=answer.status,
                body=body,
                headers={k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS},
            )

    async def __aenter__(self) -> FaultyApi:
        upstream_tls = ssl.create_default_context(cafile=str(STATE / "ca.pem"))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=upstream_tls), auto_decompress=False
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert("127.0.0.1").configure_cert(tls)
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def kubeconfig(self) -> Path:
        """A copy of the Runtime's kubeconfig whose server is this proxy (mode 0600)."""
        self.work.mkdir(parents=True, exist_ok=True)
        ca = self.work / "faulty-ca.pem"
        self._ca.cert_pem.write_to_path(str(ca))
        yaml = YAML()
        doc = yaml.load((STATE / "kubeconfig").read_text())
        doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        doc["clusters"][0]["cluster"]["certificate-authority"] = str(ca)
        path = self.work / "faulty.kubeconfig"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            yaml.dump(doc, fh)
        return path
