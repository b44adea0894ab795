"""Discovery documents: ``/version``, ``/api``, ``/apis`` and each APIResourceList.

The lab reports Kubernetes v1.31 (Job ``SuccessCriteriaMet``/``FailureTarget``
conditions appear as from 1.31).
"""

from __future__ import annotations

from typing import Any

from metallo.labs.kubernetes.resources import VERBS, group_versions, in_group_version

VERSION = {
    "major": "1", "minor": "31", "gitVersion": "v1.31.0+metallo-lab",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5", "compiler": "gc",
    "platform": "linux/amd64",
}


def _resource_list(group: str, version: str) -> dict[str, Any] | None:
    types = in_group_version(group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for r in types:
        resources.append({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                          "kind": r.kind, "verbs": VERBS, "shortNames": list(r.short_names)})
        subs = (["status"] if r.status_subresource else []) + list(r.subresources)
        for sub in subs:
            resources.append({"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                              "kind": r.kind if sub == "status" else "Pod",
                              "verbs": ["get", "patch", "update"] if sub == "status" else ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def answer(path: str) -> dict[str, Any] | None:
    """The discovery document at ``path``, or None when ``path`` is not a discovery path."""
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        return VERSION
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [_group(g, vs) for g, vs in group_versions().items()]}
    if len(parts) == 2 and parts[0] == "api":
        return _resource_list("", parts[1])
    if len(parts) == 2 and parts[0] == "apis":
        versions = group_versions().get(parts[1])
        return None if versions is None else {"kind": "APIGroup", "apiVersion": "v1", **_group(parts[1], versions)}
    if len(parts) == 3 and parts[0] == "apis":
        return _resource_list(parts[1], parts[2])
    if not parts:
        paths = ["/api", "/api/v1", "/apis", "/version", "/healthz", "/livez", "/readyz"]
        for g, vs in group_versions().items():
            paths.append(f"/apis/{g}")
            paths += [f"/apis/{g}/{v}" for v in vs]
        return {"paths": sorted(paths)}
    return None
