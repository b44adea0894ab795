"""The garbage collector and the namespace controller.

- Background: when an owner is removed, each dependent whose every
  ``ownerReferences`` owner is gone is deleted (Background again).
- Foreground: an owner marked with the ``foregroundDeletion`` finalizer has its
  dependents deleted; the finalizer is removed (and so the owner) once no dependent
  with ``blockOwnerDeletion: true`` remains.
- Orphan: an owner with the ``orphan`` finalizer has its references removed from its
  dependents, then the finalizer.
- A namespace being deleted (``phase: Terminating``) has every object in it deleted,
  then is removed. Events older than an hour are removed.
"""

from __future__ import annotations

import asyncio
import logging
import time

from metallo.labs.kubernetes.clock import parse_rfc3339
from metallo.labs.kubernetes.errors import ApiError
from metallo.labs.kubernetes.resources import EVENTS, NAMESPACES, RESOURCES, ResourceType
from metallo.labs.kubernetes.store import Store
from metallo.labs.kubernetes.watches import WatchEvent

log = logging.getLogger("metallo.labs.kubernetes.gc")
EVENT_TTL = 3600.0


class GarbageCollector:
    """Runs a pass after every change that may concern ownership (see module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._wake = asyncio.Event()
        self._removed_owners: set[str] = set()
        store.listeners.append(self._on_event)

    def _on_event(self, ev: WatchEvent) -> None:
        meta = ev.obj["metadata"]
        if ev.type == "DELETED":
            self._removed_owners.add(meta["uid"])
            self._wake.set()
        elif meta.get("deletionTimestamp") or (ev.old and ev.old["metadata"].get("ownerReferences")):
            self._wake.set()

    async def run(self) -> None:
        last_sweep = 0.0
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=5.0)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                self.sync()
                if time.time() - last_sweep > 60:
                    self._expire_events()
                    last_sweep = time.time()
            except Exception:  # noqa: BLE001 - keep collecting after a bug in one pass
                log.exception("garbage collection pass failed")

    def _all(self) -> list[tuple[ResourceType, dict]]:
        return [(r, o) for r in RESOURCES for o in list(self.store.iter(r))]

    def sync(self) -> None:
        objects = self._all()
        live_uids = {o["metadata"]["uid"] for _, o in objects}
        dependents: dict[str, list[tuple[ResourceType, dict]]] = {}
        for r, o in objects:
            for ref in o["metadata"].get("ownerReferences") or []:
                dependents.setdefault(ref.get("uid"), []).append((r, o))
        for r, o in objects:
            meta = o["metadata"]
            refs = meta.get("ownerReferences") or []
            if refs and not meta.get("deletionTimestamp") and all(x.get("uid") not in live_uids for x in refs):
                self._delete(r, o, "Background")
        for r, o in objects:
            meta = o["metadata"]
            if not meta.get("deletionTimestamp"):
                continue
            fins = meta.get("finalizers") or []
            deps = dependents.get(meta["uid"], [])
            if "orphan" in fins:
                for dr, d in deps:
                    self.store.mutate(dr, d["metadata"].get("namespace"), d["metadata"]["name"],
                                      lambda x, uid=meta["uid"]: _drop_ref(x, uid))
                self._unfinalize(r, o, "orphan")
            elif "foregroundDeletion" in fins:
                for dr, d in deps:
                    if not d["metadata"].get("deletionTimestamp"):
                        self._delete(dr, d, "Foreground")
                if not any(_blocks(d, meta["uid"]) for _, d in deps):
                    self._unfinalize(r, o, "foregroundDeletion")
            if r is NAMESPACES:
                self._drain_namespace(o)
        self._removed_owners.clear()

    def _delete(self, r: ResourceType, o: dict, policy: str) -> None:
        try:
            self.store.delete(r, o["metadata"].get("namespace"), o["metadata"]["name"], propagation=policy)
        except ApiError:
            pass

    def _unfinalize(self, r: ResourceType, o: dict, finalizer: str) -> None:
        self.store.mutate(r, o["metadata"].get("namespace"), o["metadata"]["name"],
                          lambda x: x["metadata"].__setitem__(
                              "finalizers", [f for f in x["metadata"].get("finalizers", []) if f != finalizer]))

    def _drain_namespace(self, ns: dict) -> None:
        name = ns["metadata"]["name"]
        left = False
        for r in RESOURCES:
            if not r.namespaced:
                continue
            for o in list(self.store.iter(r, name)):
                left = True
                if not o["metadata"].get("deletionTimestamp"):
                    self._delete(r, o, "Background")
        if not left:
            self.store.mutate(NAMESPACES, None, name, lambda x: x.setdefault("spec", {}).__setitem__("finalizers", []))

    def _expire_events(self) -> None:
        cutoff = time.time() - EVENT_TTL
        for ev in list(self.store.iter(EVENTS)):
            stamp = ev.get("lastTimestamp") or ev["metadata"].get("creationTimestamp")
            if stamp and parse_rfc3339(stamp) < cutoff:
                self._delete(EVENTS, ev, "Background")


def _drop_ref(obj: dict, uid: str) -> None:
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
    if refs:
        obj["metadata"]["ownerReferences"] = refs
    else:
        obj["metadata"].pop("ownerReferences", None)


def _blocks(dependent: dict, owner_uid: str) -> bool:
    return any(r.get("uid") == owner_uid and r.get("blockOwnerDeletion")
               for r in dependent["metadata"].get("ownerReferences") or [])
