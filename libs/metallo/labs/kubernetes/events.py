"""Core v1 Events the lab's controllers record (``kubectl describe`` material)."""

from __future__ import annotations

from metallo.labs.kubernetes.clock import rfc3339
from metallo.labs.kubernetes.errors import ApiError
from metallo.labs.kubernetes.resources import EVENTS
from metallo.labs.kubernetes.store import SYSTEM, Store


def record_event(store: Store, involved: dict, kind: str, reason: str, message: str) -> None:
    """An Event about ``involved`` (``kind`` Normal or Warning); a repeat of the same reason
    and message raises ``count`` instead. Skipped when the namespace is going away."""
    meta = involved["metadata"]
    now = rfc3339()
    for existing in store.iter(EVENTS, meta.get("namespace")):
        inv = existing.get("involvedObject") or {}
        if inv.get("uid") == meta.get("uid") and existing.get("reason") == reason \
                and existing.get("message") == message:
            store.mutate(EVENTS, meta.get("namespace"), existing["metadata"]["name"], lambda e: e.update(
                count=int(e.get("count", 1)) + 1, lastTimestamp=now))
            return
    event = {
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace")},
        "involvedObject": {"kind": involved.get("kind"), "apiVersion": involved.get("apiVersion"),
                           "name": meta["name"], "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "reason": reason, "message": message, "type": kind, "count": 1,
        "firstTimestamp": now, "lastTimestamp": now,
        "source": {"component": "metallo-lab"}, "reportingComponent": "metallo-lab",
    }
    try:
        store.create(EVENTS, meta.get("namespace"), event, SYSTEM)
    except ApiError:
        pass
