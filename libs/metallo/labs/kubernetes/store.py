"""The lab's object store: one cluster-wide resourceVersion, uids, optimistic concurrency.

Every write (create, update, status update, delete mark, removal) takes the next
value of one cluster-wide counter as the object's ``metadata.resourceVersion`` and
appends a watch event to a bounded log, so a watch can resume from any
resourceVersion the log still holds (older ones answer 410 Expired, as etcd
compaction does). Stored dicts are never modified in place: each write stores a
new dict, so events and readers share them safely; callers get copies.

Admission hooks run before a create or update is stored and may change the new
object or refuse it with an :class:`~metallo.labs.kubernetes.errors.ApiError`.
Listeners hear every committed event (controllers, the kubelet, the collector).
"""

from __future__ import annotations

import copy
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from metallo.labs.kubernetes import errors
from metallo.labs.kubernetes.clock import rfc3339
from metallo.labs.kubernetes.resources import NAMESPACES, PODS, ResourceType
from metallo.labs.kubernetes.watches import Watcher, WatchEvent, translate

Key = tuple[str, str, str, str]  # group, plural, namespace ("" when cluster-scoped), name

EVENT_LOG_SIZE = 20_000
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class UserInfo:
    """Who acts: the authenticated (or impersonated) user name and groups."""

    name: str
    groups: tuple[str, ...] = ()


SYSTEM = UserInfo("system:lab-controller", ("system:masters",))


Admission = Callable[[str, ResourceType, dict, dict | None, UserInfo], None]
Listener = Callable[[WatchEvent], None]


def key_of(rtype: ResourceType, namespace: str | None, name: str) -> Key:
    return rtype.group, rtype.plural, namespace or "", name


def generate_name(prefix: str) -> str:
    """``prefix`` plus five random characters from Kubernetes' alphabet."""
    return prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))


class Store:
    """In-memory objects of every served resource (see the module docstring)."""

    def __init__(self) -> None:
        self._objects: dict[Key, dict] = {}
        self._by_type: dict[tuple[str, str], set[Key]] = {}  # (group, plural) -> keys
        self._rv = 0
        self._log: deque[WatchEvent] = deque(maxlen=EVENT_LOG_SIZE)
        self._watchers: list[Watcher] = []
        self.admission: list[Admission] = []
        self.listeners: list[Listener] = []
        self.creators: dict[str, str] = {}  # uid -> user name that created the object

    # ------------------------------------------------------------------ reads
    @property
    def resource_version(self) -> int:
        """The newest resourceVersion written."""
        return self._rv

    def peek(self, rtype: ResourceType, namespace: str | None, name: str) -> dict | None:
        """The stored object itself (callers must not modify it), or None."""
        return self._objects.get(key_of(rtype, namespace, name))

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict:
        """A copy of the object; 404 NotFound when absent."""
        obj = self.peek(rtype, namespace, name)
        if obj is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        return copy.deepcopy(obj)

    def iter(self, rtype: ResourceType, namespace: str | None = None) -> Iterator[dict]:
        """Stored objects of a type (all namespaces when ``namespace`` is None), by key order."""
        keys = self._by_type.get((rtype.group, rtype.plural), set())
        for k in sorted(k for k in keys if namespace is None or k[2] == namespace):
            obj = self._objects.get(k)
            if obj is not None:
                yield obj

    def list(self, rtype: ResourceType, namespace: str | None,
             matches: Callable[[dict], bool]) -> tuple[list[dict], int]:
        """Copies of matching objects and the resourceVersion the list is consistent at."""
        return [copy.deepcopy(o) for o in self.iter(rtype, namespace) if matches(o)], self._rv

    # ------------------------------------------------------------------ writes
    def _commit(self, rtype: ResourceType, kind: str, obj: dict, old: dict | None,
                *, remove: bool = False) -> dict:
        """Store ``obj`` (a dict no caller modifies afterwards; it may share unchanged
        parts with ``old``) under the next resourceVersion and tell watchers/listeners."""
        self._rv += 1
        obj["metadata"] = {**obj["metadata"], "resourceVersion": str(self._rv)}
        k = key_of(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if remove:
            self._objects.pop(k, None)
            self._by_type.get(k[:2], set()).discard(k)
            self.creators.pop(obj["metadata"].get("uid", ""), None)
        else:
            self._objects[k] = obj
            self._by_type.setdefault(k[:2], set()).add(k)
        event = WatchEvent(self._rv, rtype, kind, obj, old)
        self._log.append(event)
        self._fan_out(event)
        for listener in list(self.listeners):
            listener(event)
        return obj

    def _admit(self, op: str, rtype: ResourceType, new: dict, old: dict | None, user: UserInfo) -> None:
        for hook in self.admission:
            hook(op, rtype, new, old, user)

    def create(self, rtype: ResourceType, namespace: str | None, body: dict, user: UserInfo,
               *, dry_run: bool = False) -> dict:
        """Store a new object; 409 AlreadyExists for a taken name, 404 for a missing
        namespace, 403 for a terminating one. ``status`` is reset when the type has a
        status subresource."""
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rtype.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            meta["namespace"] = namespace
            ns = self.peek(NAMESPACES, None, namespace or "")
            if ns is None:
                raise errors.not_found("namespaces", "", namespace or "")
            if ns["metadata"].get("deletionTimestamp"):
                raise errors.forbidden(rtype.plural, rtype.group, meta.get("name"),
                                       f"unable to create new content in namespace {namespace} "
                                       "because it is being terminated")
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(rtype.kind, rtype.group, "", [
                    ("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")])
            for _ in range(10):
                meta["name"] = generate_name(prefix)
                if self.peek(rtype, namespace, meta["name"]) is None:
                    break
        if self.peek(rtype, namespace, meta["name"]) is not None:
            raise errors.already_exists(rtype.plural, rtype.group, meta["name"])
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        for server_field in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(server_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339()
        meta["generation"] = 1
        meta.pop("resourceVersion", None)
        if rtype.status_subresource:
            obj["status"] = {}
        self._admit("CREATE", rtype, obj, None, user)
        if dry_run:
            return obj
        self.creators[meta["uid"]] = user.name
        return copy.deepcopy(self._commit(rtype, "ADDED", obj, None))

    def update(self, rtype: ResourceType, namespace: str | None, name: str, new: dict,
               user: UserInfo, *, subresource: str | None = None, dry_run: bool = False) -> dict:
        """Replace the object (PUT, or the result of a PATCH). A set
        ``metadata.resourceVersion`` must equal the stored one (409 Conflict otherwise).
        The main resource keeps the stored ``status``; ``/status`` changes only ``status``.
        ``generation`` grows when anything but metadata and status changes."""
        old = self.peek(rtype, namespace, name)
        if old is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
            raise errors.bad_request("the request body must be a JSON object with metadata")
        meta = new.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise errors.bad_request("the name of the object does not match the name on the URL")
        want_rv = meta.get("resourceVersion")
        if want_rv not in (None, "") and str(want_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, rtype.group, name, errors.STALE)
        if subresource == "status":
            obj = copy.deepcopy(old)
            obj["status"] = copy.deepcopy(new.get("status") or {})
        else:
            obj = copy.deepcopy(new)
            obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
            m = obj.setdefault("metadata", {})
            for fixed in ("uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"):
                if fixed in old["metadata"]:
                    m[fixed] = old["metadata"][fixed]
                else:
                    m.pop(fixed, None)
            m["name"] = name
            if rtype.namespaced:
                m["namespace"] = namespace
            if old["metadata"].get("deletionTimestamp"):
                added = set(m.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
                if added:
                    raise errors.forbidden(rtype.plural, rtype.group, name,
                                           "no new finalizers can be added if the object is being deleted, "
                                           f"found new finalizers {sorted(added)}")
            if rtype.status_subresource:
                if "status" in old:
                    obj["status"] = copy.deepcopy(old["status"])
                else:
                    obj.pop("status", None)
            if _spec_of(obj) != _spec_of(old):
                m["generation"] = int(old["metadata"].get("generation", 1)) + 1
        self._admit("UPDATE", rtype, obj, old, user)
        if dry_run:
            return obj
        if _same(obj, old):
            return copy.deepcopy(old)  # a no-op write keeps the resourceVersion, as the API server does
        stored = self._commit(rtype, "MODIFIED", obj, old)
        return copy.deepcopy(self._maybe_remove(rtype, stored))

    def mutate(self, rtype: ResourceType, namespace: str | None, name: str,
               change: Callable[[dict], None], *, status: bool = False) -> dict | None:
        """Controllers' write: ``change`` edits a copy in place; None when the object is gone.
        No admission; ``status=True`` keeps everything but ``status`` as stored."""
        old = self.peek(rtype, namespace, name)
        if old is None:
            return None
        if status:  # only status changes: the rest is shared with the stored object
            draft = {**old, "metadata": dict(old["metadata"]), "status": copy.deepcopy(old.get("status") or {})}
            change(draft)
            obj = {**old, "status": draft.get("status", {})}
        else:
            obj = copy.deepcopy(old)
            change(obj)
        if _same(obj, old):
            return old
        stored = self._commit(rtype, "MODIFIED", obj, old)
        return self._maybe_remove(rtype, stored)

    def delete(self, rtype: ResourceType, namespace: str | None, name: str, *,
               uid: str | None = None, resource_version: str | None = None,
               propagation: str | None = None, grace_seconds: int | None = None,
               dry_run: bool = False) -> tuple[dict, bool]:
        """Delete with preconditions (409 Conflict when ``uid``/``resource_version`` differ).

        Returns (object, removed). Foreground adds the ``foregroundDeletion`` finalizer,
        Orphan the ``orphan`` finalizer; an object with finalizers, or a Pod still
        running on the node (graceful deletion), is only marked with
        ``deletionTimestamp`` and removed later by whoever clears the last finalizer.
        """
        old = self.peek(rtype, namespace, name)
        if old is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        meta = old["metadata"]
        if uid is not None and uid != meta["uid"]:
            raise errors.conflict(rtype.plural, rtype.group, name,
                                  f"Precondition failed: UID in precondition: {uid}, "
                                  f"UID in object meta: {meta['uid']}")
        if resource_version is not None and resource_version != meta["resourceVersion"]:
            raise errors.conflict(rtype.plural, rtype.group, name,
                                  f"Precondition failed: ResourceVersion in precondition: "
                                  f"{resource_version}, ResourceVersion in object meta: "
                                  f"{meta['resourceVersion']}")
        if propagation not in (None, "Foreground", "Background", "Orphan"):
            raise errors.bad_request(f"Unsupported propagationPolicy: {propagation}")
        if dry_run:
            return copy.deepcopy(old), False
        if meta.get("deletionTimestamp"):
            return copy.deepcopy(old), False
        policy = propagation or rtype.default_propagation
        obj = copy.deepcopy(old)
        m = obj["metadata"]
        finalizers = list(m.get("finalizers") or [])
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        graceful = rtype is PODS and _pod_running_on_node(old) and grace_seconds != 0
        spec_finalizers = rtype is NAMESPACES and bool((old.get("spec") or {}).get("finalizers"))
        if spec_finalizers:
            obj.setdefault("status", {})["phase"] = "Terminating"
        if not finalizers and not graceful and not spec_finalizers:
            return copy.deepcopy(self._commit(rtype, "DELETED", obj, old, remove=True)), True
        if finalizers:
            m["finalizers"] = finalizers
        grace = 0
        if graceful:
            spec_grace = (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            grace = int(spec_grace if grace_seconds is None else grace_seconds)
        m["deletionTimestamp"] = rfc3339()
        m["deletionGracePeriodSeconds"] = grace
        return copy.deepcopy(self._commit(rtype, "MODIFIED", obj, old)), False

    def remove_now(self, rtype: ResourceType, namespace: str | None, name: str) -> None:
        """Remove a marked object whose finalizers are gone (the kubelet after a Pod's
        processes ended)."""
        old = self.peek(rtype, namespace, name)
        if old is not None and not old["metadata"].get("finalizers"):
            self._commit(rtype, "DELETED", copy.deepcopy(old), old, remove=True)

    def _maybe_remove(self, rtype: ResourceType, stored: dict) -> dict:
        meta = stored["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            if rtype is NAMESPACES and (stored.get("spec") or {}).get("finalizers"):
                return stored  # the namespace controller empties it first
            if rtype is PODS and _pod_running_on_node(stored):
                return stored  # the kubelet removes it once its containers stopped
            return self._commit(rtype, "DELETED", copy.deepcopy(stored), stored, remove=True)
        return stored

    # ------------------------------------------------------------------ watch
    def watch(self, watcher: Watcher, since: int | None) -> list[tuple[str, dict]]:
        """Register ``watcher`` and return what it must send first: the logged events after
        ``since``, or (``since`` None) ADDED for every matching object. 410 Expired when
        ``since`` is older than the log."""
        first: list[tuple[str, dict]] = []
        if since is None:
            first = [("ADDED", o) for o in self.iter(watcher.rtype, watcher.namespace) if watcher.matches(o)]
        else:
            oldest = self._log[0].rv if self._log else self._rv + 1
            if since < oldest - 1 and since < self._rv:
                raise errors.gone(f"too old resource version: {since} ({oldest - 1})")
            for ev in self._log:
                if ev.rv > since:
                    t = translate(watcher, ev)
                    if t:
                        first.append(t)
        self._watchers.append(watcher)
        return first

    def unwatch(self, watcher: Watcher) -> None:
        watcher.closed = True
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def _fan_out(self, event: WatchEvent) -> None:
        for w in list(self._watchers):
            t = translate(w, event)
            if t and not w.push(*t):
                self.unwatch(w)


def _spec_of(obj: dict) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _same(a: dict, b: dict) -> bool:
    strip = lambda o: {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "resourceVersion"}}  # noqa: E731
    return strip(a) == strip(b)


def _pod_running_on_node(pod: dict) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")
