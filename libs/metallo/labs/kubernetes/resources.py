"""The resource types the lab serves (group, version, plural, kind, scope, subresources).

Names and verbs follow the Kubernetes API reference for v1.31. Deployments,
ReplicaSets and KServe InferenceServices have no controller yet; their types are
listed so objects can be stored and watched.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    """One served resource.

    status_subresource: ``/status`` exists and the main resource ignores ``.status``.
    default_propagation: what a DELETE without ``propagationPolicy`` does to dependents
    (``Orphan`` for batch/v1 Jobs, as the API server keeps for compatibility).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    status_subresource: bool = False
    short_names: tuple[str, ...] = ()
    default_propagation: str = "Background"
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """``batch/v1`` or ``v1``."""
        return f"{self.group}/{self.version}" if self.group else self.version


VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, "namespace", True, ("ns",)),
    ResourceType("", "v1", "nodes", "Node", False, "node", True, ("no",)),
    ResourceType("", "v1", "pods", "Pod", True, "pod", True, ("po",), subresources=("log",)),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True,
                 "persistentvolumeclaim", True, ("pvc",)),
    ResourceType("", "v1", "secrets", "Secret", True, "secret"),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", short_names=("cm",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, "serviceaccount",
                 short_names=("sa",)),
    ResourceType("", "v1", "services", "Service", True, "service", True, ("svc",)),
    ResourceType("", "v1", "events", "Event", True, "event", short_names=("ev",)),
    ResourceType("", "v1", "resourcequotas", "ResourceQuota", True, "resourcequota", True,
                 ("quota",)),
    ResourceType("batch", "v1", "jobs", "Job", True, "job", True, default_propagation="Orphan"),
    ResourceType("apps", "v1", "deployments", "Deployment", True, "deployment", True, ("deploy",)),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, "replicaset", True, ("rs",)),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, "role"),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True,
                 "rolebinding"),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False,
                 "clusterrole"),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                 False, "clusterrolebinding"),
    ResourceType("serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService", True,
                 "inferenceservice", True, ("isvc",)),
    ResourceType("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False,
                 "selfsubjectaccessreview"),
)

_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    """The resource served at ``/api(s)/<group>/<version>/<plural>``, or None."""
    return _BY_PATH.get((group, version, plural))


def group_versions() -> dict[str, list[str]]:
    """Served API groups (without the core group) → versions."""
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group and r.version not in out.setdefault(r.group, []):
            out[r.group].append(r.version)
    return out


def in_group_version(group: str, version: str) -> list[ResourceType]:
    """Resources of one group/version, in the table's order."""
    return [r for r in RESOURCES if r.group == group and r.version == version]


PODS = lookup("", "v1", "pods")
JOBS = lookup("batch", "v1", "jobs")
PVCS = lookup("", "v1", "persistentvolumeclaims")
SECRETS = lookup("", "v1", "secrets")
NAMESPACES = lookup("", "v1", "namespaces")
NODES = lookup("", "v1", "nodes")
QUOTAS = lookup("", "v1", "resourcequotas")
EVENTS = lookup("", "v1", "events")
ACCESS_REVIEWS = lookup("authorization.k8s.io", "v1", "selfsubjectaccessreviews")
