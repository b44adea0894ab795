"""Watch events and the filter of one live watch (see :mod:`store`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from metallo.labs.kubernetes.resources import ResourceType


@dataclass(frozen=True)
class WatchEvent:
    """A committed change: ``type`` ADDED/MODIFIED/DELETED, the object after (for DELETED,
    the last state) and before (None for ADDED)."""

    rv: int
    rtype: ResourceType
    type: str
    obj: dict
    old: dict | None


@dataclass
class Watcher:
    """A live watch's filter and its queue callback (set by the HTTP layer)."""

    rtype: ResourceType
    namespace: str | None
    matches: Callable[[dict], bool]
    push: Callable[[str, dict], bool]  # False when the watcher is gone or too slow
    closed: bool = field(default=False)


def translate(w: Watcher, ev: WatchEvent) -> tuple[str, dict] | None:
    """The event a watcher sees: objects entering/leaving its selector are ADDED/DELETED."""
    if ev.rtype is not w.rtype:
        return None
    if w.namespace is not None and ev.obj["metadata"].get("namespace") != w.namespace:
        return None
    now = w.matches(ev.obj)
    before = ev.old is not None and w.matches(ev.old)
    if ev.type == "DELETED":
        return ("DELETED", ev.obj) if now or before else None
    if now and before:
        return "MODIFIED", ev.obj
    if now:
        return "ADDED", ev.obj
    if before:
        return "DELETED", ev.obj
    return None
