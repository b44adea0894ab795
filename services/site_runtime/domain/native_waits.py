"""The native-wait catalogue of the Site Runtime (seed 001: members see why native
work waits as a catalogued code with fixed text, never the scheduler's own text).

An observation of native work that is pending carries ``native_wait``: one code of
:data:`NATIVE_WAITS` (docs/site-commands.md). :func:`slurm_wait` maps a Slurm job's
``Reason`` (``state_reason`` in slurmrestd's job record, ``squeue -o %r``) to a code;
:func:`kubernetes_wait` maps a Pod condition's or container state's reason. Codes
are stable; the texts are the member-facing ones, and ``libs/metallo/waiting.py``
(what Execution Core and the CLI show) holds the same text for every code — a unit
test fails when the two disagree.
"""

from __future__ import annotations

from types import MappingProxyType

SLURM_OTHER = "slurm-other"

#: code -> the fixed member-facing text.
NATIVE_WAITS = MappingProxyType(
    {
        "slurm-resources": "waiting for resources",
        "slurm-priority": "waiting: other jobs have priority",
        "slurm-dependency": "waiting for the stage before it",
        "slurm-dependency-never-satisfied": "cannot start: the stage before it did not succeed",
        "slurm-begin-time": "waiting for its start time",
        "slurm-held-user": "held by its owner",
        "slurm-held-admin": "held by a Site administrator",
        "slurm-nodes-unavailable": "waiting: the nodes it needs are not available",
        "slurm-partition-unavailable": "waiting: the partition is down or inactive",
        "slurm-partition-limit": "waiting: the request exceeds a limit of the partition",
        "slurm-qos-limit": "waiting: a quality-of-service limit is reached",
        "slurm-association-limit": "waiting: a limit of the Project's account is reached",
        "slurm-reservation": "waiting for a reservation",
        "slurm-licenses": "waiting for licences",
        SLURM_OTHER: "waiting in the Site's scheduler",
        "kubernetes-unschedulable": "waiting: no node can take it yet",
        "kubernetes-image-pull": "waiting: the container image cannot be pulled",
        "kubernetes-container-config": "waiting: the container's configuration is incomplete",
        "kubernetes-crash-loop": "restarting: the container keeps exiting",
    }
)

# Exact Slurm reasons (job_reason strings of Slurm 22.05, slurm/src/common/slurm_protocol_defs.c).
_SLURM_EXACT = MappingProxyType(
    {
        "Resources": "slurm-resources",
        "Priority": "slurm-priority",
        "Dependency": "slurm-dependency",
        "DependencyNeverSatisfied": "slurm-dependency-never-satisfied",
        "BeginTime": "slurm-begin-time",
        "JobHeldUser": "slurm-held-user",
        "JobHeldAdmin": "slurm-held-admin",
        "ReqNodeNotAvail": "slurm-nodes-unavailable",
        "NodeDown": "slurm-nodes-unavailable",
        "PartitionDown": "slurm-partition-unavailable",
        "PartitionInactive": "slurm-partition-unavailable",
        "PartitionConfig": "slurm-partition-limit",
        "PartitionNodeLimit": "slurm-partition-limit",
        "PartitionTimeLimit": "slurm-partition-limit",
        "Reservation": "slurm-reservation",
        "Licenses": "slurm-licenses",
    }
)
# Families by prefix: QOS limits (QOSMaxJobsPerUserLimit, QOSGrpCpuLimit, …) and
# association limits (AssocGrpCpuLimit, AssocMaxJobsLimit, …).
_SLURM_PREFIXES = (("QOS", "slurm-qos-limit"), ("Assoc", "slurm-association-limit"))
# Reasons that mean the job is not waiting at all.
_SLURM_NONE = frozenset({"", "None"})

_KUBERNETES = MappingProxyType(
    {
        "Unschedulable": "kubernetes-unschedulable",
        "ErrImagePull": "kubernetes-image-pull",
        "ImagePullBackOff": "kubernetes-image-pull",
        "InvalidImageName": "kubernetes-image-pull",
        "CreateContainerConfigError": "kubernetes-container-config",
        "CreateContainerError": "kubernetes-container-config",
        "CrashLoopBackOff": "kubernetes-crash-loop",
    }
)


def slurm_wait(reason: str | None) -> str | None:
    """The native-wait code of a pending Slurm job's ``Reason``; None when it does not
    wait (``None`` or empty). Only the reason's first word counts (squeue shows
    ``ReqNodeNotAvail, UnavailableNodes:n1``). Unknown reasons are :data:`SLURM_OTHER`:
    the scheduler's text never reaches a member."""
    words = (reason or "").replace(",", " ").split(maxsplit=1)
    raw = words[0][:200] if words else ""
    if raw in _SLURM_NONE:
        return None
    exact = _SLURM_EXACT.get(raw)
    if exact is not None:
        return exact
    for prefix, code in _SLURM_PREFIXES:
        if raw.startswith(prefix) and raw.endswith("Limit"):
            return code
    return SLURM_OTHER


def kubernetes_wait(reason: str | None) -> str | None:
    """The native-wait code of a Pod's waiting reason (a ``PodScheduled`` condition's
    ``Unschedulable``, a container's ``waiting.reason``); None for any other reason."""
    return _KUBERNETES.get((reason or "").strip())


def text(code: str) -> str:
    """The member-facing text of a catalogued code; raises KeyError for any other."""
    return NATIVE_WAITS[code]
