"""What a ``k8s-job`` Attempt runs, read from its ``prepare`` payload and checked against
the Site's settings before anything is created (seed 004 §5A/§5B; docs/site-runtime.md,
Kubernetes).

The command, pre-commands, environment, working directory and deadline follow the
local executor's rules (:func:`site_runtime.domain.local_batch.parse_job`); this module
adds what a cluster needs: the member's Kubernetes subject and Project namespace, the
Unix identity the Pods run as, requests/limits, the GPU class map and the wall-time
limit. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from site_runtime.domain.kubernetes_names import is_dns_label
from site_runtime.domain.local_batch import InvalidMaterial, LocalJob, parse_job

#: The member-facing message of ``unsupported-kubernetes-inputs``.
KUBERNETES_INPUTS = "extra repository inputs are not checked out on Kubernetes Sites yet"

#: Definite refusals of ``prepare`` (outcome ``refused``; nothing native exists).
REFUSALS = {
    "invalid-material": "the prepare payload or its spec cannot be run as written",
    "unsupported-kubernetes-inputs": "extra repository ``inputs`` are not checked out on "
    "Kubernetes Sites yet",
    "kubernetes-wall-time-above-limit": "wallTimeSeconds exceeds the Site's KUBERNETES_MAX_WALL_SECONDS",
    "unsupported-kubernetes-accelerator-class": "the Site's KUBERNETES_GPU_CLASSES has no such gpuClass",
    "kubernetes-member-unmapped": "the Site knows no Unix identity (runAsUser) for the member's "
    "binding, so its Pods cannot run as the member",
    "material-changed": "a second prepare for the Attempt carries different material",
    "authorisation-refused": "the Site edge refused the execution (reason in the message)",
    "native-request-denied": "the Kubernetes API refused a create with 403 Forbidden (RBAC, "
    "impersonation or ResourceQuota)",
    "native-request-invalid": "the Kubernetes API refused a create with 422 Invalid",
    "native-object-conflict": "an object with the Attempt's deterministic name exists with "
    "another identity (409 AlreadyExists)",
}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")


@dataclass(frozen=True)
class GpuClass:
    """How one ``gpuClass`` is asked for on this Site: the extended resource name
    (``nvidia.com/gpu``) and the node selector that picks the class's nodes."""

    resource: str
    node_selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KubernetesSite:
    """The Site's settings that the rendering depends on (units: seconds, MiB).

    ``job_image``/``helper_image``: the fixed platform images of the Job and of the
    stage helper Pods; ``helper_argv``: the helper's command in its image (the stage
    name is appended); ``namespace_template``: ``{project}``/``{account}`` → namespace;
    ``run_as``: site username → (uid, gid) of its Pods; ``member_groups``: groups sent
    with every impersonated request; ``max_wall_seconds``: None for no limit.
    """

    site_id: str
    job_image: str
    helper_image: str
    helper_argv: tuple[str, ...]
    run_as: Mapping[str, tuple[int, int]]
    mount_path: str = "/workspace"
    namespace_template: str = "metallo-{project}"
    member_groups: tuple[str, ...] = ()
    gpu_classes: Mapping[str, GpuClass] = field(default_factory=dict)
    max_wall_seconds: int | None = None
    staging_seconds: int = 600
    workspace_mib: int = 1024
    storage_class: str | None = None
    helper_cpu_millis: int = 250
    helper_memory_mib: int = 256
    repository_ca_file: str | None = None
    author_name: str = "Metallo"
    author_email: str = "metallo@localhost"


@dataclass(frozen=True)
class Member:
    """The member as the cluster knows them: impersonated ``user`` and ``groups``, the
    Project ``namespace`` and the Unix ``uid``/``gid`` their Pods run as."""

    member_id: str
    user: str
    groups: tuple[str, ...]
    namespace: str
    uid: int
    gid: int


@dataclass(frozen=True)
class KubernetesJob:
    """One ``k8s-job`` Attempt's material, checked (see :func:`parse_kubernetes_job`)."""

    job: LocalJob
    member: Member
    cpus: int
    memory_mib: int
    gpus: int
    gpu: GpuClass | None


def _int(resources: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = resources.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidMaterial("invalid-material", f"resources.{key} must be {low}..{high}")
    return value


def resolve_member(payload: Mapping[str, Any], site: KubernetesSite) -> Member:
    """The member's Kubernetes subject, namespace and Unix identity from the payload's
    binding. Raises InvalidMaterial (``invalid-material``, ``kubernetes-member-unmapped``)."""
    member = payload.get("member") if isinstance(payload.get("member"), dict) else {}
    user = str(member.get("site_username") or "")
    account = str(member.get("account") or "")
    project = str(payload.get("project") or "")
    if not _NAME.match(user) or not _NAME.match(account or project or "-"):
        raise InvalidMaterial("invalid-material", "the member binding is missing or malformed")
    try:
        namespace = site.namespace_template.format(project=project, account=account)
    except (KeyError, IndexError, ValueError):
        raise InvalidMaterial(
            "invalid-material", "the namespace template cannot be filled"
        ) from None
    if not is_dns_label(namespace):
        raise InvalidMaterial(
            "invalid-material", f"namespace {namespace!r} is not a DNS-1123 label"
        )
    ids = site.run_as.get(user)
    if ids is None:
        raise InvalidMaterial(
            "kubernetes-member-unmapped", f"no runAsUser is configured for {user!r} on this Site"
        )
    uid, gid = ids
    if uid <= 0 or gid <= 0:
        raise InvalidMaterial("kubernetes-member-unmapped", "members never run as root")
    return Member(str(member.get("id") or ""), user, tuple(site.member_groups), namespace, uid, gid)


def parse_kubernetes_job(payload: Mapping[str, Any], site: KubernetesSite) -> KubernetesJob:
    """Read and check a ``prepare`` payload for this Site, before any create.

    Raises :class:`InvalidMaterial` with a code of :data:`REFUSALS`: the GPU class must be
    in the Site's map, the wall time within its limit, the member mapped to a Unix id.
    """
    if payload.get("family", "queued-batch") != "queued-batch":
        raise InvalidMaterial("invalid-material", "the kubernetes executor runs queued-batch here")
    try:
        job = parse_job(dict(payload))
    except InvalidMaterial as refusal:
        if refusal.code == "unsupported-local-inputs":
            raise InvalidMaterial("unsupported-kubernetes-inputs", KUBERNETES_INPUTS) from None
        raise
    if site.max_wall_seconds is not None and job.wall_time_seconds > site.max_wall_seconds:
        raise InvalidMaterial(
            "kubernetes-wall-time-above-limit",
            f"wallTimeSeconds {job.wall_time_seconds} exceeds this Site's {site.max_wall_seconds}",
        )
    spec = payload.get("spec") or {}
    resources = spec.get("resources") if isinstance(spec.get("resources"), dict) else {}
    cpus = _int(resources, "cpus", 1, 1, 1024)
    memory = _int(resources, "memoryMiB", 1024, 16, 4194304)
    gpus = _int(resources, "gpus", 0, 0, 64)
    gpu = None
    if gpus:
        name = resources.get("gpuClass")
        if not isinstance(name, str) or name not in site.gpu_classes:
            raise InvalidMaterial(
                "unsupported-kubernetes-accelerator-class",
                f"this Site offers no gpuClass {name!r}",
            )
        gpu = site.gpu_classes[name]
    return KubernetesJob(job, resolve_member(payload, site), cpus, memory, gpus, gpu)
