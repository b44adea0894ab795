"""The native-wait catalogue of the Site Runtime (seed 001: members see why native
work waits as a catalogued code with fixed text, never the scheduler's own text).

An observation of native work that is pending carries ``native_wait``: one code of
:data:`NATIVE_WAITS` (docs/site-commands.md). :func:`slurm_wait` maps a Slurm job's
``Reason`` (``state_reason`` in slurmrestd's job record, ``squeue -o %r``) to a code;
:func:`kubernetes_wait` maps a Pod condition's or container state's reason. Codes
are stable; each code's fixed member-facing text lives in ``metallo.waiting`` (what
Execution Core and the CLI show), and :data:`NATIVE_WAITS` pairs them.
"""

from __future__ import annotations

from types import MappingProxyType

from metallo.waiting import NATIVE_WAIT_TEXTS

SLURM_OTHER = "slurm-other"
#: A compute job Slurm requeued within the Site's bound: it waits to run again.
SLURM_REQUEUED = "slurm-job-requeued"

#: The catalogue: every code an observation's ``native_wait`` may carry.
NATIVE_WAIT_CODES = frozenset(
    {
        "slurm-resources",
        "slurm-priority",
        "slurm-dependency",
        "slurm-dependency-never-satisfied",
        "slurm-begin-time",
        "slurm-held-user",
        "slurm-held-admin",
        "slurm-nodes-unavailable",
        "slurm-partition-unavailable",
        "slurm-partition-limit",
        "slurm-qos-limit",
        "slurm-association-limit",
        "slurm-reservation",
        "slurm-licenses",
        SLURM_OTHER,
        SLURM_REQUEUED,
        "kubernetes-unschedulable",
        "kubernetes-image-pull",
        "kubernetes-container-config",
        "kubernetes-crash-loop",
    }
)

#: code -> its fixed member-facing text (one text per code, kept in the shared
#: library so Execution Core and the CLI show the same words; a code without one
#: fails here, at import).
NATIVE_WAITS = MappingProxyType({code: NATIVE_WAIT_TEXTS[code] for code in sorted(NATIVE_WAIT_CODES)})

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

#: Kubernetes reasons -> catalogued codes: a ``PodScheduled`` condition's reason and a
#: (init) container's ``state.waiting.reason`` (Kubernetes API reference, ContainerStateWaiting;
#: kubelet's images and container-runtime error reasons). The kubernetes executor's
#: codes come only from here.
KUBERNETES_REASONS = MappingProxyType(
    {
        "Unschedulable": "kubernetes-unschedulable",
        "ErrImagePull": "kubernetes-image-pull",
        "ImagePullBackOff": "kubernetes-image-pull",
        "InvalidImageName": "kubernetes-image-pull",
        "ErrImageNeverPull": "kubernetes-image-pull",
        "CreateContainerConfigError": "kubernetes-container-config",
        "CreateContainerError": "kubernetes-container-config",
        "RunContainerError": "kubernetes-container-config",
        "CrashLoopBackOff": "kubernetes-crash-loop",
    }
)
if not set(KUBERNETES_REASONS.values()) <= NATIVE_WAIT_CODES:  # one list: fail at import
    raise RuntimeError("a Kubernetes reason maps to an uncatalogued native-wait code")


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
    return KUBERNETES_REASONS.get((reason or "").strip())


def text(code: str) -> str:
    """The member-facing text of a catalogued code; raises KeyError for any other."""
    return NATIVE_WAITS[code]
