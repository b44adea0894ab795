"""ResourceQuota: enforced when a Pod or PVC is created, ``status.used`` kept current.

Tracked names: ``pods``, ``persistentvolumeclaims``, ``requests.storage``,
``requests.<resource>``/``limits.<resource>`` (``cpu``, ``memory``,
``nvidia.com/gpu``...; a bare ``cpu``/``memory`` means ``requests.``), and
``count/<plural>.<group>``. Pods in phase Succeeded or Failed use nothing. A create
that would pass ``hard`` is refused with 403 Forbidden as the API server words it:
``pods "x" is forbidden: exceeded quota: metallo-quota, requested: pods=1, used:
pods=20, limited: pods=20``; a Pod without the cpu or memory request a quota tracks gets
``failed quota: metallo-quota: must specify requests.cpu``.
"""

from __future__ import annotations

import asyncio
from fractions import Fraction

from metallo.labs.kubernetes import errors
from metallo.labs.kubernetes.quantity import format_quantity, parse_quantity
from metallo.labs.kubernetes.resources import PODS, PVCS, QUOTAS, RESOURCES, ResourceType
from metallo.labs.kubernetes.store import Store, UserInfo
from metallo.labs.kubernetes.watches import WatchEvent

# A Pod must name these when a quota tracks them (extended resources need not).
_MUST_SPECIFY = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory",
                           "requests.ephemeral-storage", "limits.ephemeral-storage"})


def _pod_usage(pod: dict) -> dict[str, Fraction]:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return {}
    spec = pod.get("spec") or {}
    use: dict[str, Fraction] = {"pods": Fraction(1)}
    for kind in ("requests", "limits"):
        total: dict[str, Fraction] = {}
        for c in spec.get("containers") or []:
            for k, v in ((c.get("resources") or {}).get(kind) or {}).items():
                total[k] = total.get(k, Fraction(0)) + parse_quantity(v)
        for c in spec.get("initContainers") or []:
            for k, v in ((c.get("resources") or {}).get(kind) or {}).items():
                total[k] = max(total.get(k, Fraction(0)), parse_quantity(v))
        for k, v in total.items():
            use[f"{kind}.{k}"] = v
            if kind == "requests" and k in ("cpu", "memory"):
                use[k] = v
    return use


def _pvc_usage(pvc: dict) -> dict[str, Fraction]:
    storage = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage", "0")
    return {"persistentvolumeclaims": Fraction(1), "requests.storage": parse_quantity(storage)}


def usage_of(rtype: ResourceType, obj: dict) -> dict[str, Fraction]:
    """What one object uses of a quota."""
    use = _pod_usage(obj) if rtype is PODS else _pvc_usage(obj) if rtype is PVCS else {}
    suffix = f".{rtype.group}" if rtype.group else ""
    use[f"count/{rtype.plural}{suffix}"] = Fraction(1)
    return use


def _counts_towards(rtype: ResourceType, names: set[str]) -> bool:
    suffix = f".{rtype.group}" if rtype.group else ""
    if f"count/{rtype.plural}{suffix}" in names:
        return True
    if rtype is PODS:
        return any(n == "pods" or n.startswith(("requests.", "limits.")) or n in ("cpu", "memory")
                   for n in names if n != "requests.storage")
    return rtype is PVCS and bool({"persistentvolumeclaims", "requests.storage"} & names)


def namespace_usage(store: Store, namespace: str, names: set[str] | None = None) -> dict[str, Fraction]:
    """What the namespace's objects use, for the quota ``names`` (all when None)."""
    total: dict[str, Fraction] = {}
    for rtype in RESOURCES:
        if not rtype.namespaced or rtype is QUOTAS or (names is not None and not _counts_towards(rtype, names)):
            continue
        for obj in store.iter(rtype, namespace):
            for k, v in usage_of(rtype, obj).items():
                if names is None or k in names:
                    total[k] = total.get(k, Fraction(0)) + v
    return total


class QuotaAdmission:
    """The store hook refusing creates beyond a namespace's quotas."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __call__(self, op: str, rtype: ResourceType, new: dict, old: dict | None, user: UserInfo) -> None:
        if op != "CREATE" or not rtype.namespaced or rtype is QUOTAS:
            return
        ns = new["metadata"]["namespace"]
        quotas = list(self.store.iter(QUOTAS, ns))
        if not quotas:
            return
        want = usage_of(rtype, new)
        tracked = {k for q in quotas for k in ((q.get("spec") or {}).get("hard") or {})}
        if not tracked & set(want) and not (rtype is PODS and tracked & _MUST_SPECIFY):
            return
        used = namespace_usage(self.store, ns, tracked)
        name = new["metadata"].get("name")
        for quota in quotas:
            hard = {k: parse_quantity(v) for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()}
            qname = quota["metadata"]["name"]
            if rtype is PODS:
                missing = [k for k in hard if k in _MUST_SPECIFY and k not in want]
                if missing:
                    raise errors.forbidden(rtype.plural, rtype.group, name,
                                           f"failed quota: {qname}: must specify {','.join(sorted(missing))}")
            over = [k for k, limit in hard.items() if k in want and used.get(k, Fraction(0)) + want[k] > limit]
            if over:
                fmt = lambda d, keys=tuple(sorted(over)): ",".join(f"{k}={format_quantity(d.get(k, Fraction(0)))}" for k in keys)  # noqa: E731
                raise errors.forbidden(rtype.plural, rtype.group, name,
                                       f"exceeded quota: {qname}, requested: {fmt(want)}, used: {fmt(used)}, "
                                       f"limited: {fmt(hard)}")


class QuotaController:
    """Keeps ``status.hard`` and ``status.used`` of every ResourceQuota current."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._wake = asyncio.Event()
        store.listeners.append(self._on_event)

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.rtype.namespaced and not (ev.rtype is QUOTAS and ev.old and ev.old.get("spec") == ev.obj.get("spec")):
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0.2)  # one pass for a burst of changes
            self.sync()

    def sync(self) -> None:
        for quota in list(self.store.iter(QUOTAS)):
            meta = quota["metadata"]
            hard = dict((quota.get("spec") or {}).get("hard") or {})
            used = namespace_usage(self.store, meta["namespace"], set(hard))
            status = {"hard": hard, "used": {k: format_quantity(used.get(k, Fraction(0))) for k in hard}}
            self.store.mutate(QUOTAS, meta["namespace"], meta["name"],
                              lambda o, s=status: o.__setitem__("status", s), status=True)
