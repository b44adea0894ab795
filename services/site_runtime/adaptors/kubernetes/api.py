"""The Kubernetes API as the executor uses it, through ``lightkube`` (async; ADR
"Kubernetes client").

- **Creates** go as the member: every create sends ``Impersonate-User`` (the
  binding's Kubernetes user) and ``Impersonate-Group`` (the Site's member groups),
  so RBAC, impersonation and ResourceQuota decide exactly as for the member.
- **Reads** (one list per kind per observe cycle, by label selector, across the
  Site's namespaces), **Pod logs** and **deletes** go as the Runtime's own identity
  from the kubeconfig, which may read and clean up but creates nothing itself.
- A delete names the exact ``metadata.uid`` (``preconditions.uid``) with
  ``propagationPolicy: Foreground``; an object whose uid is not known yet (journalled
  only as an intent) of a kind the Runtime may not read is deleted on its collection by
  exact name and this Attempt's labels; lightkube's ``delete`` sends no body and its
  ``log`` has no ``limitBytes``, so those two use the same TLS/auth settings from
  lightkube's kubeconfig loader over one raw ``httpx2`` client.

Every failure is a :class:`KubeError` with the HTTP status (None when there was no
answer) and the ``Status`` body, for :func:`site_runtime.domain.kubernetes_errors.classify`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from lightkube import AsyncClient, codecs
from lightkube.config.client_adapter import ConnectionParams, verify_cluster
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ApiError
from lightkube.core.generic_client import ALL_NS
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import PersistentVolumeClaim, Pod, Secret

KINDS = {"Job": Job, "Pod": Pod, "PersistentVolumeClaim": PersistentVolumeClaim, "Secret": Secret}
_PATHS = {
    "Job": "apis/batch/v1/namespaces/{ns}/jobs/{name}",
    "Pod": "api/v1/namespaces/{ns}/pods/{name}",
    "PersistentVolumeClaim": "api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
    "Secret": "api/v1/namespaces/{ns}/secrets/{name}",
}
MAX_LOG_FETCH = 32 * 1024 * 1024


class KubeError(Exception):
    """A request failed: ``status`` is the HTTP status (None: no answer — connection
    lost, TLS failure, timeout) and ``body`` the API's ``Status`` object, if any."""

    def __init__(self, status: int | None, body: dict[str, Any] | None, what: str) -> None:
        super().__init__(
            f"{what}: {status if status is not None else 'no answer'}"
            f" {(body or {}).get('reason', '')}".rstrip()
        )
        self.status = status
        self.body = body or {}


class _Impersonating(httpx2.AsyncBaseTransport):
    """Adds the impersonation headers to every request of one member's client."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, user: str, groups: tuple[str, ...]):
        self._inner = inner
        self._user = user
        self._groups = groups

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # Whatever asked for another identity is dropped: only the member's is sent.
        headers = [
            (k, v)
            for k, v in request.headers.multi_items()
            if not k.lower().startswith("impersonate-")
        ]
        headers.append(("Impersonate-User", self._user))
        headers.extend(("Impersonate-Group", group) for group in self._groups)
        request.headers = httpx2.Headers(headers)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _from_error(error: Exception, what: str) -> KubeError:
    if isinstance(error, ApiError):
        try:
            body = error.response.json()
        except (ValueError, AttributeError):
            body = {}
        return KubeError(error.response.status_code, body if isinstance(body, dict) else {}, what)
    if isinstance(error, httpx2.HTTPStatusError):
        return KubeError(error.response.status_code, {}, what)
    return KubeError(None, {"reason": type(error).__name__}, what)


class KubeApi:
    """One Site's Kubernetes API (see the module doc); ``timeout`` in seconds per request."""

    def __init__(
        self, kubeconfig: Path | None, *, context: str | None = None, timeout: float = 10.0
    ):
        """``kubeconfig`` None: the in-cluster ServiceAccount credentials."""
        config = (
            KubeConfig.from_service_account()
            if kubeconfig is None
            else KubeConfig.from_file(kubeconfig)
        )
        self.config: SingleConfig = config.get(context)
        self._timeout = httpx2.Timeout(timeout)
        self._runtime = AsyncClient(self.config, timeout=self._timeout, trust_env=False)
        params = ConnectionParams(timeout=self._timeout, trust_env=False).httpx_params(self.config)
        self._raw = httpx2.AsyncClient(**params)
        self._members: dict[tuple[str, tuple[str, ...]], AsyncClient] = {}
        #: Wraps the transport of each impersonating client made from now on (metrics).
        self.wrap_transport: Callable[[httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport] = (
            lambda transport: transport)

    def _member(self, user: str, groups: tuple[str, ...]) -> AsyncClient:
        key = (user, groups)
        client = self._members.get(key)
        if client is None:
            verify = verify_cluster(
                self.config.cluster, self.config.user, self.config.abs_file, trust_env=False
            )
            inner = self.wrap_transport(httpx2.AsyncHTTPTransport(verify=verify))
            client = AsyncClient(
                self.config,
                timeout=self._timeout,
                trust_env=False,
                transport=_Impersonating(inner, user, groups),
            )
            self._members[key] = client
        return client

    async def create(
        self, manifest: dict[str, Any], *, user: str, groups: tuple[str, ...]
    ) -> dict[str, Any]:
        """Create ``manifest`` as ``user`` (impersonated); the created object's
        ``{"metadata": {name, namespace, uid, annotations}}`` (the rest is not decoded)."""
        what = f"create {manifest['kind']} {manifest['metadata']['name']}"
        try:
            created = await self._member(user, groups).create(codecs.from_dict(manifest))
        except Exception as error:  # noqa: BLE001 - every failure is classified by the caller
            raise _from_error(error, what) from None
        meta = created.metadata
        return {
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
                "annotations": dict(meta.annotations or {}),
            }
        }

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as JSON (as the Runtime), None when it does not exist."""
        try:
            obj = await self._runtime.get(KINDS[kind], name, namespace=namespace)
        except ApiError as error:
            if error.response.status_code == 404:
                return None
            raise _from_error(error, f"get {kind} {name}") from None
        except Exception as error:  # noqa: BLE001
            raise _from_error(error, f"get {kind} {name}") from None
        return obj.to_dict()

    async def list(self, kind: str, selector: str) -> list[dict[str, Any]]:
        """Every ``kind`` object matching the label ``selector`` in every namespace: one
        list request (its pages followed), as the Runtime."""
        try:
            items = [
                obj.to_dict()
                async for obj in self._runtime.list(
                    KINDS[kind], namespace=ALL_NS, labels=_labels(selector)
                )
            ]
        except Exception as error:  # noqa: BLE001
            raise _from_error(error, f"list {kind}") from None
        return items

    async def delete_exact(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        """Delete exactly the object with ``uid`` (Foreground propagation), as the
        Runtime. True when a delete was accepted, False when it is gone already (404,
        or 409 because the name now holds another object)."""
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Foreground",
            "preconditions": {"uid": uid},
        }
        path = _PATHS[kind].format(ns=namespace, name=name)
        try:
            answer = await self._raw.request(
                "DELETE",
                path,
                content=json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
        except Exception as error:  # noqa: BLE001
            raise _from_error(error, f"delete {kind} {name}") from None
        if answer.status_code in (404, 409):
            return False
        if answer.status_code >= 300:
            raise KubeError(answer.status_code, _json(answer), f"delete {kind} {name}")
        return True

    async def delete_labelled(self, kind: str, namespace: str, name: str, selector: str) -> int:
        """Delete the object named ``name`` only if it carries every label of ``selector``
        (one DELETE on the collection with ``fieldSelector=metadata.name``), as the
        Runtime, Foreground. Returns how many objects the answer lists: 0 when no such
        object exists any more (one still being deleted is listed again)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}
        path = _PATHS[kind].format(ns=namespace, name=name).rsplit("/", 1)[0]
        params = {"labelSelector": selector, "fieldSelector": f"metadata.name={name}"}
        try:
            answer = await self._raw.request(
                "DELETE",
                path,
                params=params,
                content=json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
        except Exception as error:  # noqa: BLE001
            raise _from_error(error, f"delete {kind} {name}") from None
        if answer.status_code == 404:
            return 0
        if answer.status_code >= 300:
            raise KubeError(answer.status_code, _json(answer), f"delete {kind} {name}")
        items = _json(answer).get("items")
        if not isinstance(items, list):
            raise KubeError(answer.status_code, {"reason": "MalformedAnswer"}, f"delete {kind}")
        return len(items)

    async def gone(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        """True when no object with ``uid`` exists under ``name`` any more."""
        obj = await self.get(kind, namespace, name)
        return obj is None or (obj.get("metadata") or {}).get("uid") != uid

    async def log(self, namespace: str, pod: str, container: str | None, limit_bytes: int) -> bytes:
        """The Pod's log from its start, at most ``limit_bytes`` (as the Runtime)."""
        params: dict[str, Any] = {"limitBytes": min(limit_bytes, MAX_LOG_FETCH)}
        if container:
            params["container"] = container
        path = f"api/v1/namespaces/{namespace}/pods/{pod}/log"
        try:
            answer = await self._raw.get(path, params=params)
        except Exception as error:  # noqa: BLE001
            raise _from_error(error, f"log {pod}") from None
        if answer.status_code >= 300:
            raise KubeError(answer.status_code, _json(answer), f"log {pod}")
        return answer.content[:limit_bytes]

    async def close(self) -> None:
        """Close every connection."""
        await self._runtime.close()
        for client in self._members.values():
            await client.close()
        await self._raw.aclose()


def _json(answer: httpx2.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _labels(selector: str) -> dict[str, str]:
    """``a=b,c=d`` as lightkube's label mapping."""
    return dict(part.split("=", 1) for part in selector.split(",") if part)
