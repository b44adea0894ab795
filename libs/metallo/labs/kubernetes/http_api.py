"""The lab's Kubernetes REST API over aiohttp: routing, verbs, watch streams, Status errors.

Paths follow the Kubernetes API conventions (``/api/v1/namespaces/<ns>/<plural>/<name>
[/<subresource>]``, ``/apis/<group>/<version>/...``). Every request is authenticated
by bearer token, may impersonate (``Impersonate-User``/``Impersonate-Group``) and is
authorised by :class:`~metallo.labs.kubernetes.authz.Authorizer` before it touches
the store; every refusal is a ``Status`` body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from metallo.labs.kubernetes import discovery, errors, patches
from metallo.labs.kubernetes.authz import Authorizer
from metallo.labs.kubernetes.resources import ACCESS_REVIEWS, NAMESPACES, ResourceType, lookup
from metallo.labs.kubernetes.selectors import parse_field_selector, parse_label_selector
from metallo.labs.kubernetes.store import Store, UserInfo
from metallo.labs.kubernetes.watches import Watcher

log = logging.getLogger("metallo.labs.kubernetes")

MAX_BODY = 3 * 1024 * 1024  # the API server's default request size limit
WATCH_QUEUE = 10_000
_TRUE = ("true", "True", "1")


@dataclass(frozen=True)
class Target:
    """A parsed resource path."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_target(path: str) -> Target | None:
    """The resource a path names, or None when it is not a resource path. An unknown
    resource under a served group is a 404 NotFound."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise errors.not_found("", "", path)
    plural = rest[0]
    rtype = lookup(group, version, plural)
    if rtype is None:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    if rtype.namespaced != (namespace is not None) and len(rest) > 1:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else None
    if sub is not None and sub != "status" and sub not in rtype.subresources:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    return Target(rtype, namespace, name, sub)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data, separators=(",", ":")).encode(), status=status,
                        content_type="application/json")


class KubernetesApi:
    """aiohttp handlers over a :class:`Store`; ``logs`` answers ``pods/<name>/log``."""

    def __init__(self, store: Store, authorizer: Authorizer, logs: Any) -> None:
        self.store = store
        self.authorizer = authorizer
        self.logs = logs

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._handle(request)
        except errors.ApiError as e:
            return _json(e.status(), e.code)
        except web.HTTPRequestEntityTooLarge:
            return _json(errors.ApiError(413, "RequestEntityTooLarge", "request entity too large").status(), 413)
        except Exception:  # noqa: BLE001 - a lab bug must answer a Status, not drop the connection
            log.exception("internal error on %s %s", request.method, request.path)
            return _json(errors.ApiError(500, "InternalError", "an error on the server has prevented "
                                         "the request from succeeding").status(), 500)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        user = self.authorizer.authenticate(request.headers)
        user = self.authorizer.impersonate(user, request.headers)
        found = discovery.answer(path)
        if found is not None:
            return _json(found)
        target = parse_target(path)
        if target is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        verb = _verb(request.method, target, request.query)
        if target.rtype is ACCESS_REVIEWS and verb == "create":
            return _json(self._access_review(user, await _body_json(request)), 201)
        self.authorizer.authorize(user, verb, target.rtype, target.subresource, target.namespace,
                                  target.name)
        if verb in ("list", "watch") and target.name is None:
            if verb == "watch":
                return await self._watch(request, target)
            return self._list(request, target)
        if target.subresource == "log":
            return await self.logs.serve(request, target.namespace, target.name)
        dry_run = request.query.get("dryRun") == "All"
        if verb == "get":
            return _json(self.store.get(target.rtype, target.namespace, target.name))
        if verb == "create":
            body = await _body_json(request)
            return _json(self.store.create(target.rtype, target.namespace, body, user, dry_run=dry_run), 201)
        if verb == "update":
            body = await _body_json(request)
            return _json(self.store.update(target.rtype, target.namespace, target.name, body, user,
                                           subresource=target.subresource, dry_run=dry_run))
        if verb == "patch":
            return await self._patch(request, target, user, dry_run)
        if verb == "delete":
            return await self._delete(request, target, dry_run)
        if verb == "deletecollection":
            return await self._delete_collection(request, target, dry_run)
        raise errors.method_not_allowed()

    def _access_review(self, user: UserInfo, body: dict) -> dict:
        """SelfSubjectAccessReview: may the (impersonated) caller do what ``spec.resourceAttributes``
        names? Every authenticated user may ask; nothing is stored."""
        attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
        resource = attrs.get("resource", "")
        if attrs.get("subresource"):
            resource = f"{resource}/{attrs['subresource']}"
        allowed = self.authorizer.allowed(user, attrs.get("verb", ""), attrs.get("group", ""), resource,
                                          attrs.get("namespace") or None, attrs.get("name") or None)
        return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": body.get("spec") or {},
                "status": {"allowed": allowed} if allowed else {"allowed": False, "reason": ""}}

    def _list(self, request: web.Request, target: Target) -> web.Response:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), target.rtype.plural)
        items, rv = self.store.list(target.rtype, target.namespace,
                                    lambda o: labels(o["metadata"].get("labels") or {}) and fields(o))
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        limit = request.query.get("limit")
        start = _continue_offset(request.query.get("continue"))
        if limit and limit.isdigit() and int(limit) > 0:
            end = start + int(limit)
            if end < len(items):
                meta["continue"] = str(end)
                meta["remainingItemCount"] = len(items) - end
            items = items[start:end]
        elif start:
            items = items[start:]
        return _json({"kind": f"{target.rtype.kind}List", "apiVersion": target.rtype.api_version,
                      "metadata": meta, "items": items})

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), target.rtype.plural)
        since_text = request.query.get("resourceVersion")
        since = None
        if since_text not in (None, "", "0"):
            if not since_text.isdigit():
                raise errors.bad_request(f"invalid resource version: {since_text}")
            since = int(since_text)
        timeout = request.query.get("timeoutSeconds")
        timeout_s = min(float(timeout), 3600.0) if timeout and timeout.isdigit() else 1800.0
        bookmarks = request.query.get("allowWatchBookmarks") in _TRUE
        queue: asyncio.Queue[tuple[str, dict] | None] = asyncio.Queue(maxsize=WATCH_QUEUE)

        def push(kind: str, obj: dict) -> bool:
            try:
                queue.put_nowait((kind, obj))
                return True
            except asyncio.QueueFull:
                return False

        watcher = Watcher(target.rtype, target.namespace,
                          lambda o: labels(o["metadata"].get("labels") or {}) and fields(o), push)
        first = self.store.watch(watcher, since)
        response = web.StreamResponse(headers={"Content-Type": "application/json",
                                               "Transfer-Encoding": "chunked"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            for kind, obj in first:
                await _send(response, kind, obj)
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=min(left, 10.0))
                except TimeoutError:
                    if watcher.closed:
                        break
                    if bookmarks:
                        await _send(response, "BOOKMARK", {
                            "kind": target.rtype.kind, "apiVersion": target.rtype.api_version,
                            "metadata": {"resourceVersion": str(self.store.resource_version)}})
                    continue
                if item is None:
                    break
                await _send(response, *item)
            if watcher.closed and queue.full():
                await _send(response, "ERROR", errors.gone("the watch fell too far behind").status())
        except ConnectionError:
            pass
        finally:
            self.store.unwatch(watcher)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _patch(self, request: web.Request, target: Target, user: UserInfo,
                     dry_run: bool) -> web.Response:
        ctype = (request.content_type or "").split(";")[0].strip()
        if ctype not in patches.PATCH_TYPES:
            raise errors.unsupported_media(ctype)
        body = patches.decode_body(await request.read(), ctype)
        if ctype == patches.APPLY and not request.query.get("fieldManager"):
            raise errors.bad_request("PATCH /apply requires a fieldManager")
        current = self.store.peek(target.rtype, target.namespace, target.name)
        if current is None:
            if ctype != patches.APPLY:
                raise errors.not_found(target.rtype.plural, target.rtype.group, target.name)
            if not isinstance(body, dict):
                raise errors.bad_request("an apply patch must be an object")
            body.setdefault("metadata", {})["name"] = target.name
            self.authorizer.authorize(user, "create", target.rtype, None, target.namespace, None)
            created = self.store.create(target.rtype, target.namespace, body, user, dry_run=dry_run)
            return _json(created, 201)
        base = current if target.subresource != "status" else {"status": current.get("status", {}),
                                                                  "metadata": current["metadata"]}
        new = patches.apply_patch(base, ctype, body)
        if target.subresource == "status":
            new = {**current, "status": new.get("status", {})}
        if not (isinstance(body, dict) and (body.get("metadata") or {}).get("resourceVersion")):
            # A patch without a resourceVersion applies to the current object (never in place:
            # unpatched parts of ``new`` are the stored object's own).
            new = {**new, "metadata": {**(new.get("metadata") or {}),
                                       "resourceVersion": current["metadata"]["resourceVersion"]}}
        return _json(self.store.update(target.rtype, target.namespace, target.name, new, user,
                                       subresource=target.subresource, dry_run=dry_run))

    async def _delete(self, request: web.Request, target: Target, dry_run: bool) -> web.Response:
        options = await _delete_options(request)
        pre = options.get("preconditions") or {}
        policy, grace = _policy_and_grace(request, options)
        obj, removed = self.store.delete(
            target.rtype, target.namespace, target.name, uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"), propagation=policy,
            grace_seconds=grace, dry_run=dry_run)
        return _json(obj, 200 if removed or dry_run else 202)

    async def _delete_collection(self, request: web.Request, target: Target, dry_run: bool) -> web.Response:
        """DELETE on a collection: every object the selectors match, as one DELETE each;
        answers the list of what was deleted (as the API server does)."""
        options = await _delete_options(request)
        policy, grace = _policy_and_grace(request, options)
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), target.rtype.plural)
        items, _ = self.store.list(target.rtype, target.namespace,
                                   lambda o: labels(o["metadata"].get("labels") or {}) and fields(o))
        deleted = []
        for item in items:
            meta = item["metadata"]
            try:
                obj, _ = self.store.delete(target.rtype, meta.get("namespace"), meta["name"], propagation=policy,
                                           grace_seconds=grace, dry_run=dry_run)
                deleted.append(obj)
            except errors.ApiError as e:
                if e.code != 404:
                    raise
        return _json({"kind": f"{target.rtype.kind}List", "apiVersion": target.rtype.api_version,
                      "metadata": {"resourceVersion": str(self.store.resource_version)}, "items": deleted})


def _verb(method: str, target: Target, query: Any) -> str:
    if method == "GET":
        if query.get("watch") in _TRUE:
            return "watch"
        return "get" if target.name else "list"
    if target.name is None:
        if method == "POST":
            return "create"
        if method == "DELETE":
            return "deletecollection"
        raise errors.method_not_allowed()
    if target.rtype is NAMESPACES and target.subresource == "finalize":
        return "update"
    return {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method) or _refuse()


async def _delete_options(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    options = _loads(raw) if raw.strip() else {}
    if not isinstance(options, dict):
        raise errors.bad_request("DeleteOptions must be a JSON object")
    return options


def _policy_and_grace(request: web.Request, options: dict[str, Any]) -> tuple[str | None, int | None]:
    policy = options.get("propagationPolicy") or request.query.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    grace = options.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds"))
    try:
        return policy, None if grace is None else int(grace)
    except (TypeError, ValueError):
        raise errors.bad_request(f"invalid gracePeriodSeconds: {grace!r}") from None


def _refuse() -> str:
    raise errors.method_not_allowed()


def _continue_offset(token: str | None) -> int:
    if not token:
        return 0
    if not token.isdigit():
        raise errors.gone("the provided continue parameter is too old to display a consistent list result")
    return int(token)


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise errors.bad_request(f"the body of the request could not be decoded: {e}") from None


async def _body_json(request: web.Request) -> dict:
    data = _loads(await request.read())
    if not isinstance(data, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return data


async def _send(response: web.StreamResponse, kind: str, obj: dict) -> None:
    await response.write(json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n")
