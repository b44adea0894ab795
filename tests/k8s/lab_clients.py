"""Clients of the Kubernetes lab for tests (scripts/k8s-lab up; docs/k8s-lab.md).

``lab_problem()`` says why the lab cannot be used (tests fail, never skip, on it);
``admin()`` is a lightkube AsyncClient with the administrator's kubeconfig,
``runtime()`` the Site Runtime's, ``member(user)`` the Runtime impersonating a member
(``Impersonate-User``/``Impersonate-Group`` added by an httpx transport).
"""

from __future__ import annotations

import os
import ssl
import uuid
from pathlib import Path

import httpx2
from lightkube import AsyncClient, KubeConfig

STATE = Path(os.environ.get("METALLO_K8S_LAB_STATE", "/var/lib/metallo-k8s-lab"))
NAMESPACE = "metallo-demo"  # the demo Project's namespace (examples/governance.yaml)
IMAGE = "metallo/platform:1"


def lab_problem() -> str | None:
    """None when the lab answers; otherwise what to do."""
    kubeconfig = STATE / "admin.kubeconfig"
    if not kubeconfig.exists():
        return f"the Kubernetes lab is not set up ({kubeconfig} is missing): run scripts/k8s-lab up"
    ctx = ssl.create_default_context(cafile=str(STATE / "ca.pem"))
    server = KubeConfig.from_file(kubeconfig).get().cluster.server
    try:
        httpx2.get(f"{server}/readyz", verify=ctx, timeout=5).raise_for_status()
    except httpx2.HTTPError as e:
        return f"the Kubernetes lab does not answer at {server} ({e}): run scripts/k8s-lab up"
    return None


class Impersonating(httpx2.AsyncBaseTransport):
    """Adds ``Impersonate-User`` and one ``Impersonate-Group`` header per group."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, user: str, groups: tuple[str, ...]) -> None:
        self.inner = inner
        self.user = user
        self.groups = groups

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        items = [(k, v) for k, v in request.headers.multi_items() if not k.lower().startswith("impersonate-")]
        items.append(("Impersonate-User", self.user))
        items += [("Impersonate-Group", g) for g in self.groups]
        request.headers = httpx2.Headers(items)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _client(kubeconfig: str, transport: httpx2.AsyncBaseTransport | None = None,
            namespace: str = NAMESPACE) -> AsyncClient:
    return AsyncClient(KubeConfig.from_file(STATE / kubeconfig), namespace=namespace,
                       transport=transport, field_manager="metallo-tests")


def admin(namespace: str = NAMESPACE) -> AsyncClient:
    return _client("admin.kubeconfig", namespace=namespace)


def runtime(namespace: str = NAMESPACE) -> AsyncClient:
    return _client("kubeconfig", namespace=namespace)


def member(user: str, groups: tuple[str, ...] = ("metallo:members",), namespace: str = NAMESPACE) -> AsyncClient:
    ctx = ssl.create_default_context(cafile=str(STATE / "ca.pem"))
    return _client("kubeconfig", Impersonating(httpx2.AsyncHTTPTransport(verify=ctx), user, groups), namespace)


def raw(kubeconfig: str = "admin.kubeconfig", impersonate: str | None = None,
        groups: tuple[str, ...] = ("metallo:members",)) -> httpx2.AsyncClient:
    """A plain httpx client with the kubeconfig's server, CA and token (for raw API
    calls); ``impersonate`` adds ``Impersonate-User`` (and the groups)."""
    cfg = KubeConfig.from_file(STATE / kubeconfig).get()
    ctx = ssl.create_default_context(cafile=str(STATE / "ca.pem"))
    headers = [("Authorization", f"Bearer {cfg.user.token}")]
    if impersonate:
        headers += [("Impersonate-User", impersonate)] + [("Impersonate-Group", g) for g in groups]
    return httpx2.AsyncClient(base_url=cfg.cluster.server, verify=ctx, timeout=30, headers=httpx2.Headers(headers))


def as_member(user: str) -> httpx2.AsyncClient:
    """The Runtime's token impersonating ``user`` (raw HTTPS)."""
    return raw("kubeconfig", impersonate=user)


async def close(client: AsyncClient) -> None:
    """Close a client's connections."""
    await client._client.close()


def unique(prefix: str) -> str:
    """A name no other test run uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def job_manifest(name: str, argv: list[str], **pod: object) -> dict:
    """A batch/v1 Job as the executor renders one: ``restartPolicy: Never``,
    ``backoffLimit: 0``, small requests; ``pod`` keys go into the Pod spec, except
    ``job_spec`` (a dict merged into the Job spec) and ``container`` (merged into the
    container)."""
    job_spec = dict(pod.pop("job_spec", {}) or {})
    container = {"name": "main", "image": IMAGE, "command": argv,
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    container.update(pod.pop("container", {}) or {})
    spec = {"restartPolicy": "Never", "containers": [container], **pod}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"metallo.io/test": "lab"}},
            "spec": {"backoffLimit": 0, "template": {"spec": spec}, **job_spec}}


async def wait_for(check, timeout: float = 30.0, every: float = 0.1):
    """Await ``check()`` until it returns something truthy; AssertionError on timeout."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(every)
    raise AssertionError(f"not reached within {timeout} s (last: {last!r})")
