"""Authoring action types and what they map to (seed 004, "Workload families and serviceKind").

The execution environment comes only from the action type: actions.yaml has no
environment field, and neither do the public requests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActionType:
    """One row of seed 004's mapping table.

    service_kind is None for queued-batch types ("Not applicable" in the seed).
    """

    name: str
    environment: str  # "slurm" | "k8s"
    family: str  # "queued-batch" | "reconciled-service"
    service_kind: str | None  # "application" | "huggingface-inference" | None


ACTION_TYPES: dict[str, ActionType] = {
    t.name: t
    for t in (
        ActionType("slurm-job", "slurm", "queued-batch", None),
        ActionType("k8s-job", "k8s", "queued-batch", None),
        ActionType("k8s-deployment", "k8s", "reconciled-service", "application"),
        ActionType("k8s-inferenceservice", "k8s", "reconciled-service", "huggingface-inference"),
    )
}


def action_type(name: str) -> ActionType:
    """The :class:`ActionType` for ``name``; raises KeyError for an unknown type."""
    return ACTION_TYPES[name]
