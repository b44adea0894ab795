"""A Pod's status as the kubelet reports it, built from what its worker knows.

Shapes follow the Kubernetes API reference (Pod v1, "PodStatus", "ContainerStatus",
"ContainerState*"): ``phase``, ``conditions`` (PodReadyToStartContainers,
Initialized, Ready, ContainersReady, PodScheduled), ``initContainerStatuses`` and
``containerStatuses`` with ``state``/``lastState``, ``restartCount``, ``ready``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metallo.labs.kubernetes.clock import rfc3339


@dataclass
class ContainerRecord:
    """One container's state as a ContainerState dict (waiting/running/terminated)."""

    name: str
    image: str
    init: bool
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    container_id: str | None = None

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        out: dict[str, Any] = {
            "name": self.name, "state": self.state, "lastState": self.last_state,
            "ready": running and not self.init, "restartCount": self.restart_count,
            "image": self.image, "imageID": f"lab://{self.image}" if self.container_id else "",
            "started": running,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


@dataclass
class PodRecord:
    """What the worker tracks for one Pod; :meth:`status` renders the PodStatus."""

    restart_policy: str
    init: list[ContainerRecord]
    main: list[ContainerRecord]
    qos: str
    scheduled: bool = False
    unschedulable: str | None = None
    sandbox_ready: bool = False
    start_time: str | None = None
    phase_override: str | None = None
    reason: str | None = None
    message: str | None = None
    stopping: bool = False  # SIGTERM sent (deletion or deadline); never started again
    transitions: dict[str, tuple[str, str]] = field(default_factory=dict)

    def init_done(self) -> bool:
        return all(c.state.get("terminated", {}).get("exitCode") == 0 for c in self.init)

    def phase(self) -> str:
        if self.phase_override:
            return self.phase_override
        if not self.scheduled:
            return "Pending"
        never = self.restart_policy == "Never"
        if never and any(c.state.get("terminated", {}).get("exitCode", 0) != 0 for c in self.init):
            return "Failed"
        if not self.init_done():
            return "Pending"
        ended = [c.state.get("terminated") for c in self.main]
        if all(ended):
            clean = all(t["exitCode"] == 0 for t in ended)
            if never:
                return "Succeeded" if clean else "Failed"
            if self.restart_policy == "OnFailure" and clean:
                return "Succeeded"
        if any("running" in c.state for c in self.main) or any(ended):
            return "Running"
        return "Pending"

    def _condition(self, kind: str, ok: bool, reason: str | None = None,
                   message: str | None = None) -> dict[str, Any]:
        status = "True" if ok else "False"
        prev = self.transitions.get(kind)
        at = prev[1] if prev and prev[0] == status else rfc3339()
        self.transitions[kind] = (status, at)
        out: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None,
                               "lastTransitionTime": at}
        if reason:
            out["reason"] = reason
        if message:
            out["message"] = message
        return out

    def status(self) -> dict[str, Any]:
        phase = self.phase()
        conditions = []
        if self.scheduled:
            conditions.append(self._condition("PodReadyToStartContainers",
                                              self.sandbox_ready and phase not in ("Succeeded", "Failed")))
            waiting_init = [c.name for c in self.init if c.state.get("terminated", {}).get("exitCode") != 0]
            conditions.append(self._condition(
                "Initialized", not waiting_init, None if not waiting_init else "ContainersNotInitialized",
                None if not waiting_init else f"containers with incomplete status: [{' '.join(waiting_init)}]"))
            unready = [c.name for c in self.main if "running" not in c.state]
            done = phase in ("Succeeded", "Failed")
            reason = "PodCompleted" if done else ("ContainersNotReady" if unready else None)
            message = None if done or not unready else f"containers with unready status: [{' '.join(unready)}]"
            conditions.append(self._condition("Ready", not unready, reason, message))
            conditions.append(self._condition("ContainersReady", not unready, reason, message))
            conditions.append(self._condition("PodScheduled", True))
        else:
            conditions.append(self._condition("PodScheduled", False, "Unschedulable" if self.unschedulable else None,
                                              self.unschedulable))
        out: dict[str, Any] = {"phase": phase, "conditions": conditions, "qosClass": self.qos}
        if self.scheduled:
            out.update({"hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}], "podIP": "127.0.0.1",
                        "podIPs": [{"ip": "127.0.0.1"}], "startTime": self.start_time})
            if self.init:
                out["initContainerStatuses"] = [c.status() for c in self.init]
            out["containerStatuses"] = [c.status() for c in self.main]
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        return out


def qos_class(spec: dict) -> str:
    """Guaranteed / Burstable / BestEffort from requests and limits."""
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        any_set = any_set or bool(req) or bool(lim)
        for name in ("cpu", "memory"):
            if name not in lim or req.get(name, lim[name]) != lim[name]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
