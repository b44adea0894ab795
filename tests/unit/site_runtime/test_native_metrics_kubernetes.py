"""Kubernetes API requests on the Runtime's /metrics: every client of a KubeApi (its
own, the raw one, and impersonating ones made later) counts its requests under
``target="kubernetes"``; errors are transport failures and HTTP 5xx."""

from __future__ import annotations

import httpx2
import pytest

from metallo.operations.metrics import NATIVE_REQUEST_ERRORS, NATIVE_REQUEST_SECONDS
from site_runtime.adaptors.kubernetes.api import KubeApi
from site_runtime.adaptors.native_metrics import MeasuredKubeTransport, measure_kube_api

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: not-a-secret}
contexts:
- name: x
  context: {cluster: c, user: u, namespace: default}
current-context: x
"""


def _count(method: str) -> float:
    return sum(s.value for m in NATIVE_REQUEST_SECONDS.collect() for s in m.samples
               if s.name.endswith("_count")
               and s.labels == {"target": "kubernetes", "method": method})


def _errors(method: str) -> float:
    return NATIVE_REQUEST_ERRORS.labels("kubernetes", method)._value.get()


def test_every_client_of_the_api_is_measured(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    api = KubeApi(path)
    measure_kube_api(api)
    assert isinstance(api._runtime._client._client._transport, MeasuredKubeTransport)
    assert isinstance(api._raw._transport, MeasuredKubeTransport)
    impersonating = api._member("alice", ("demo",))._client._client._transport
    assert isinstance(impersonating._inner, MeasuredKubeTransport)  # under the impersonation
    measure_kube_api(api)  # twice wraps once
    assert isinstance(api._raw._transport.inner, httpx2.AsyncHTTPTransport)


async def test_requests_and_errors_are_counted_by_method():
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(503 if request.url.path == "/down" else 200, json={})

    client = httpx2.AsyncClient(transport=MeasuredKubeTransport(httpx2.MockTransport(answer)),
                                base_url="https://k8s.invalid")
    gets, errors = _count("GET"), _errors("GET")
    assert (await client.get("/api")).status_code == 200
    assert (await client.get("/down")).status_code == 503
    assert (_count("GET"), _errors("GET")) == (gets + 2, errors + 1)

    def broken(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    failing = httpx2.AsyncClient(transport=MeasuredKubeTransport(httpx2.MockTransport(broken)),
                                 base_url="https://k8s.invalid")
    deletes = _errors("DELETE")
    with pytest.raises(httpx2.ConnectError):
        await failing.delete("/api/v1/namespaces/default/pods/p")
    assert _errors("DELETE") == deletes + 1
