"""Admission: defaults, the validation the lab checks, and the lab's Pod security rule.

Defaults are the API server's (Pod ``restartPolicy: Always``,
``terminationGracePeriodSeconds: 30``...; Job selector and labels; Secret
``stringData`` folded into base64 ``data``). Validation answers 422 Invalid for what
a cluster refuses: the OpenAPI schema (:mod:`validation`), names that are not DNS
names, Pods without containers or images, a Job template whose ``restartPolicy``
is not ``Never``/``OnFailure``, a changed Job ``spec.template``.

Pod security (403 Forbidden, like a PodSecurity/SCC refusal): no ``privileged``,
``hostNetwork``/``hostPID``/``hostIPC`` or ``hostPath``; containers never run as root.
A Pod created by a member (or by the Job controller for a member's Job) runs as that
member's Unix user: a missing ``runAsUser`` is set to the member's uid, another uid is
refused. Pods created by the lab administrator must name a non-root ``runAsUser``.
"""

from __future__ import annotations

import base64
import pwd
import re
from collections.abc import Callable

from metallo.labs.kubernetes import errors
from metallo.labs.kubernetes.jobs import job_defaults
from metallo.labs.kubernetes.pod_status import qos_class
from metallo.labs.kubernetes.resources import JOBS, NAMESPACES, PODS, PVCS, SECRETS, ResourceType
from metallo.labs.kubernetes.store import UserInfo
from metallo.labs.kubernetes.validation import schema_causes

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL_TYPES = ("namespaces", "jobs", "services", "deployments", "inferenceservices")


def _name_causes(rtype: ResourceType, name: str) -> list[tuple[str, str, str]]:
    if rtype.plural in _DNS_LABEL_TYPES:
        ok, limit = bool(_LABEL.match(name)), 63
        rule = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                "and must start and end with an alphanumeric character")
    else:
        ok, limit = bool(_SUBDOMAIN.match(name)), 253
        rule = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                "or '.', and must start and end with an alphanumeric character")
    if not ok:
        return [("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {rule}')]
    if len(name) > limit:
        return [("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": must be no more than {limit} characters')]
    return []


def _pod_spec_causes(spec: dict, prefix: str) -> list[tuple[str, str, str]]:
    causes = []
    containers = spec.get("containers")
    if not containers:
        causes.append((f"{prefix}.containers", "FieldValueRequired", "Required value"))
    names = set()
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            where = f"{prefix}.{kind}[{i}]"
            if not c.get("name"):
                causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
            elif c["name"] in names:
                causes.append((f"{where}.name", "FieldValueDuplicate", f'Duplicate value: "{c["name"]}"'))
            names.add(c.get("name"))
            if not c.get("image"):
                causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
    policy = spec.get("restartPolicy", "Always")
    if policy not in ("Always", "OnFailure", "Never"):
        causes.append((f"{prefix}.restartPolicy", "FieldValueNotSupported",
                       f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"'))
    return causes


def _pod_defaults(pod: dict) -> None:
    spec = pod.setdefault("spec", {})
    for key, value in (("restartPolicy", "Always"), ("terminationGracePeriodSeconds", 30),
                       ("dnsPolicy", "ClusterFirst"), ("schedulerName", "default-scheduler"),
                       ("serviceAccountName", "default"), ("securityContext", {}), ("enableServiceLinks", True),
                       ("preemptionPolicy", "PreemptLowerPriority"), ("priority", 0)):
        spec.setdefault(key, value)
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        c.setdefault("resources", {})
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        image = str(c.get("image", ""))
        c.setdefault("imagePullPolicy", "Always" if image.endswith(":latest") or ":" not in image.split("/")[-1]
                     else "IfNotPresent")
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def _pod_security(pod: dict, user: UserInfo, uid_of: Callable[[str], int | None]) -> None:
    spec, name = pod["spec"], pod["metadata"].get("name")

    def refuse(why: str) -> None:
        raise errors.forbidden("pods", "", name, f'violates PodSecurity "restricted:latest": {why}')

    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        refuse("host namespaces (hostNetwork=true, hostPID=true or hostIPC=true)")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            refuse(f'restricted volume types (volume "{v["name"]}" uses restricted volume type "hostPath")')
    member_uid = uid_of(user.name)
    psc = spec.setdefault("securityContext", {})
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    for c in containers:
        if (c.get("securityContext") or {}).get("privileged"):
            refuse(f'privileged (container "{c["name"]}" must not set securityContext.privileged=true)')
    if psc.get("runAsUser") is None and member_uid is not None:
        psc["runAsUser"] = member_uid
    for who, sc in [("pod", psc)] + [(f'container "{c["name"]}"', c.get("securityContext") or {}) for c in containers]:
        run_as = sc.get("runAsUser", psc.get("runAsUser"))
        if run_as is None:
            refuse(f"runAsNonRoot != true ({who} must set securityContext.runAsUser: the lab has no image user)")
        if int(run_as) == 0:
            refuse(f"runAsUser=0 ({who} must not set runAsUser=0)")
        if member_uid is not None and int(run_as) != member_uid:
            refuse(f"runAsUser={run_as} ({who} must run as the member's user {user.name}, uid {member_uid})")


def unix_uid(user_name: str, members: Callable[[], dict[str, str]]) -> int | None:
    """The Unix uid of a member's Kubernetes user (None for non-members)."""
    unix = members().get(user_name)
    if unix is None:
        return None
    try:
        return pwd.getpwnam(unix).pw_uid
    except KeyError:
        raise errors.forbidden("pods", "", None, f"the lab has no Unix user {unix!r} for member {user_name!r} "
                               "(run scripts/k8s-lab up)") from None


class Admission:
    """The store hook: ``admit(op, rtype, new, old, user)``; ``members()`` maps member
    users to Unix users; ``creator_of(uid)`` names who created an owner object."""

    def __init__(self, members: Callable[[], dict[str, str]]) -> None:
        self.members = members

    def __call__(self, op: str, rtype: ResourceType, new: dict, old: dict | None, user: UserInfo) -> None:
        name = new["metadata"].get("name", "")
        causes = _name_causes(rtype, name) if op == "CREATE" else []
        causes += schema_causes(new)
        if rtype is PODS:
            causes += _pod_spec_causes(new.get("spec") or {}, "spec")
        if rtype is JOBS:
            template = ((new.get("spec") or {}).get("template") or {})
            causes += _pod_spec_causes(template.get("spec") or {}, "spec.template.spec")
            policy = (template.get("spec") or {}).get("restartPolicy")
            if policy not in ("Never", "OnFailure"):
                causes.append(("spec.template.spec.restartPolicy", "FieldValueRequired" if policy is None
                               else "FieldValueNotSupported",
                               'Required value: valid values: "OnFailure", "Never"'))
            if old is not None and (old.get("spec") or {}).get("template") != template:
                causes.append(("spec.template", "FieldValueInvalid", "Invalid value: field is immutable"))
        if causes:
            raise errors.invalid(rtype.kind, rtype.group, name, list(dict.fromkeys(causes)))
        if rtype is SECRETS:
            for k, v in (new.pop("stringData", None) or {}).items():
                new.setdefault("data", {})[k] = base64.b64encode(str(v).encode()).decode()
        if op != "CREATE":
            return
        if rtype is PODS:
            _pod_defaults(new)
            _pod_security(new, user, lambda n: unix_uid(n, self.members))
        elif rtype is JOBS:
            job_defaults(new)
        elif rtype is SECRETS:
            new.setdefault("type", "Opaque")
        elif rtype is NAMESPACES:
            new.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            new["status"] = {"phase": "Active"}
            new["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        elif rtype is PVCS:
            new["status"] = {"phase": "Pending"}
