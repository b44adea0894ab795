"""The lab's one node and the fit check the scheduler makes for a Pod.

The node ``lab-node`` has allocatable ``cpu``, ``memory``, ``pods`` (and extended
resources such as ``nvidia.com/gpu`` when configured). A Pod fits when its requests
(the larger of the sum over containers and each init container) plus those of the
Pods already bound and not finished stay within allocatable, and its nodeSelector
matches the node's labels. Messages follow the scheduler's wording.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

from metallo.labs.kubernetes.quantity import parse_quantity

NODE_NAME = "lab-node"


def pod_requests(pod: dict) -> dict[str, Fraction]:
    """Effective requests (a limit without a request counts as the request)."""
    spec = pod.get("spec") or {}

    def of(container: dict) -> dict[str, Fraction]:
        res = container.get("resources") or {}
        out = {k: parse_quantity(v) for k, v in (res.get("limits") or {}).items()}
        out.update({k: parse_quantity(v) for k, v in (res.get("requests") or {}).items()})
        return out

    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Fraction(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Fraction(0)), v)
    return total


def node_object(allocatable: Mapping[str, str], labels: Mapping[str, str]) -> dict:
    """The Node as the API serves it."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE_NAME, "labels": {
            "kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", **labels}},
        "spec": {},
        "status": {
            "capacity": dict(allocatable), "allocatable": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": NODE_NAME}],
            "nodeInfo": {"kubeletVersion": "v1.31.0+metallo-lab", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "metallo-lab://1"},
        },
    }


def unfit_reason(pod: dict, node: dict, bound: Iterable[dict]) -> str | None:
    """None when the Pod fits the node, else the scheduler's message."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return ("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
                "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
    allocatable = {k: parse_quantity(v) for k, v in node["status"]["allocatable"].items()}
    used: dict[str, Fraction] = {"pods": Fraction(0)}
    for other in bound:
        used["pods"] += 1
        for k, v in pod_requests(other).items():
            used[k] = used.get(k, Fraction(0)) + v
    want = {"pods": Fraction(1), **pod_requests(pod)}
    short = []
    for name, amount in sorted(want.items()):
        if amount <= 0:
            continue
        if used.get(name, Fraction(0)) + amount > allocatable.get(name, Fraction(0)):
            short.append("Too many pods" if name == "pods" else f"Insufficient {name}")
    if short:
        return (f"0/1 nodes are available: {', '.join(f'1 {s}' for s in short)}. preemption: 0/1 nodes "
                "are available: 1 No preemption victims found for incoming pod.")
    return None
