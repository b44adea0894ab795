"""The lab's cluster layout and RBAC, derived from the governance file.

- One namespace per Project provisioned on the lab Site (default ``lab-k8s``):
  ``metallo-<project id>``, labelled ``metallo.io/project: <project id>``.
- A member's Kubernetes user is their binding's ``site_username`` at that Site.
- Project capabilities become namespace rules (what a Role would grant):
  ``runs.read`` reads Pods, Pod logs, Jobs, PVCs, events and quotas; ``runs.launch``
  also creates, changes and deletes Jobs, Pods, PVCs, Secrets and ConfigMaps;
  ``runs.cancel`` deletes Jobs and Pods.
- The Site Runtime's service account may impersonate exactly the member users of the
  Site and the groups ``system:authenticated`` and ``metallo:members``, may read
  (get/list/watch) Jobs, Pods, Pod logs, PVCs, events, quotas, namespaces and nodes in
  every namespace, and may delete Jobs, Pods, Secrets and PVCs (cleanup after a member
  left) — Secrets also as a collection, never get or list them; it creates nothing as
  itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from metallo.governance import Governance
from metallo.labs.kubernetes.authz import Policy, Rule, rule

RUNTIME_USER = "system:serviceaccount:metallo-system:site-runtime"
RUNTIME_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:metallo-system",
                  "system:authenticated")
ADMIN_USER = "lab-admin"
MEMBER_GROUP = "metallo:members"
PROJECT_LABEL = "metallo.io/project"

READ = rule("get,list,watch", ",batch,apps,serving.kserve.io",
            "pods,pods/log,jobs,persistentvolumeclaims,events,resourcequotas,deployments,replicasets,"
            "inferenceservices,services,configmaps")
LAUNCH = rule("create,get,list,watch,update,patch,delete,deletecollection", ",batch,apps,serving.kserve.io",
              "pods,jobs,persistentvolumeclaims,secrets,configmaps,deployments,replicasets,"
              "inferenceservices,services")
CANCEL = rule("get,list,watch,delete,deletecollection", ",batch", "pods,jobs")

RUNTIME_READ = rule("get,list,watch", ",batch,apps,serving.kserve.io",
                    "pods,pods/log,jobs,persistentvolumeclaims,events,resourcequotas,namespaces,nodes,"
                    "deployments,replicasets,inferenceservices")
RUNTIME_CLEANUP = rule("delete", ",batch", "pods,jobs,persistentvolumeclaims")
#: Grant Secrets are deleted, never read: deletecollection (by exact name and the
#: Attempt's labels) removes one whose uid is unknown (docs/decisions/0029).
RUNTIME_SECRETS = rule("delete,deletecollection", "", "secrets")

CAPABILITY_RULES: dict[str, Rule] = {"runs.read": READ, "runs.launch": LAUNCH, "runs.cancel": CANCEL}


def namespace_for(project_id: str) -> str:
    """The Project's namespace: ``metallo-<project id>``."""
    return f"metallo-{project_id}"


@dataclass(frozen=True)
class Layout:
    """Namespaces (name → Project id), member users (Kubernetes user → Unix user) and RBAC."""

    namespaces: dict[str, str]
    members: dict[str, str]
    policy: Policy


def layout_from(governance: Governance, site_id: str) -> Layout:
    """The lab's layout for ``site_id`` (Projects without that Site get no namespace)."""
    namespaces: dict[str, str] = {}
    members: dict[str, str] = {}
    namespaced: dict[tuple[str, str], tuple[Rule, ...]] = {}
    for member in governance.members.values():
        binding = member.bindings.get(site_id)
        if binding is not None:
            members[binding.site_username] = binding.site_username
    for project in governance.projects.values():
        if site_id not in project.sites:
            continue
        ns = namespace_for(project.id)
        namespaces[ns] = project.id
        for member_id, caps in project.capabilities.items():
            binding = governance.binding(member_id, site_id)
            if binding is None:
                continue
            rules = tuple(CAPABILITY_RULES[c] for c in sorted(caps) if c in CAPABILITY_RULES)
            if rules:
                namespaced[(ns, binding.site_username)] = rules
    impersonate = (
        rule("impersonate", "", "users", tuple(sorted(members))),
        rule("impersonate", "", "groups", ("system:authenticated", MEMBER_GROUP)),
    )
    policy = Policy(cluster={RUNTIME_USER: (*impersonate, RUNTIME_READ, RUNTIME_CLEANUP,
                                            RUNTIME_SECRETS)},
                    namespaced=namespaced)
    return Layout(namespaces, members, policy)
