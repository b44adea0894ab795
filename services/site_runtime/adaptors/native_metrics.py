"""The Runtime's native requests measured (docs/operators.md, Metrics): the Site edge
(``target="site_edge"``), slurmrestd with the slurm executor (``"slurmrestd"``) and
the Kubernetes API with the kubernetes executor (``"kubernetes"``: the Runtime's own
client, the raw one and every impersonating client it makes later)."""

from __future__ import annotations

import httpx2

from metallo.operations.http_metrics import measure_client, timed_request
from site_runtime.adaptors.edge.client import EdgeClient


class MeasuredKubeTransport(httpx2.AsyncBaseTransport):
    """:class:`metallo.operations.http_metrics.MeasuredTransport` for lightkube's httpx2
    clients: times every request, counts transport errors and HTTP 5xx answers."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, target: str = "kubernetes"):
        self.inner = inner
        self.target = target

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await timed_request(self.target, request.method,
                                   lambda: self.inner.handle_async_request(request))

    async def aclose(self) -> None:
        await self.inner.aclose()


def _measure_httpx2(client: httpx2.AsyncClient) -> None:
    inner = client._transport  # noqa: SLF001 - httpx2 has no public setter either
    if not isinstance(inner, MeasuredKubeTransport):
        client._transport = MeasuredKubeTransport(inner)  # noqa: SLF001


def measure_kube_api(api: object) -> None:
    """Measure a :class:`~site_runtime.adaptors.kubernetes.api.KubeApi`'s clients."""
    runtime = getattr(getattr(getattr(api, "_runtime", None), "_client", None), "_client", None)
    for client in (runtime, getattr(api, "_raw", None)):
        if isinstance(client, httpx2.AsyncClient):
            _measure_httpx2(client)
    if hasattr(api, "wrap_transport"):
        api.wrap_transport = MeasuredKubeTransport  # type: ignore[attr-defined]


def measure_native_requests(edge: EdgeClient, executor: object) -> None:
    """Wrap the edge client's and (when present) the slurmrestd and Kubernetes clients'
    transports."""
    measure_client(edge._client, "site_edge")  # noqa: SLF001
    rest = getattr(executor, "rest", None)
    http = getattr(rest, "_http", None)
    if callable(http):  # SlurmRest builds its client on first use; build it now
        measure_client(http(), "slurmrestd")
    api = getattr(executor, "api", None)
    if api is not None and hasattr(api, "wrap_transport"):
        measure_kube_api(api)
