"""The Kubernetes lab's RBAC from the governance file, without the lab process.

A member removed from a Project, or a capability withdrawn, loses the matching
Kubernetes rights on the next request (the lab asks for the current layout per
request); the Runtime may impersonate only the members bound at the Site.
"""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from metallo.governance import parse_governance
from metallo.labs.kubernetes.authz import Authorizer, Token
from metallo.labs.kubernetes.errors import ApiError
from metallo.labs.kubernetes.policy import RUNTIME_GROUPS, RUNTIME_USER, layout_from, namespace_for
from metallo.labs.kubernetes.resources import JOBS, PODS
from metallo.labs.kubernetes.store import UserInfo

GOVERNANCE = """
version: 1
sites:
  lab-k8s: {name: K8s lab, environment: k8s, ready: true}
  other: {name: Other, environment: k8s, ready: true}
members:
  m-alice: {name: Alice, bindings: {lab-k8s: {site_username: alice, account: demo}}}
  m-carol: {name: Carol, bindings: {other: {site_username: carol, account: demo}}}
projects:
  demo:
    name: Demo
    sites: [lab-k8s]
    concurrent_run_limit: 10
    members:
      m-alice: [runs.launch, runs.read, runs.cancel]
"""

RUNTIME = UserInfo(RUNTIME_USER, RUNTIME_GROUPS)


def headers(**values: str) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict([(k.replace("_", "-"), v) for k, v in values.items()]))


def test_namespaces_and_members_come_from_the_site():
    layout = layout_from(parse_governance(GOVERNANCE), "lab-k8s")
    assert layout.namespaces == {"metallo-demo": "demo"} and namespace_for("demo") == "metallo-demo"
    assert layout.members == {"alice": "alice"}  # carol is bound at another Site only


def test_a_withdrawn_capability_applies_to_the_next_request():
    current = {"g": parse_governance(GOVERNANCE)}
    authz = Authorizer([Token("t", RUNTIME)], lambda: layout_from(current["g"], "lab-k8s").policy)
    alice = authz.impersonate(RUNTIME, headers(Impersonate_User="alice"))
    authz.authorize(alice, "create", JOBS, None, "metallo-demo", None)
    current["g"] = parse_governance(GOVERNANCE.replace("[runs.launch, runs.read, runs.cancel]", "[runs.read]"))
    with pytest.raises(ApiError) as e:
        authz.authorize(alice, "create", JOBS, None, "metallo-demo", None)
    assert e.value.code == 403 and 'User "alice" cannot create resource "jobs"' in e.value.message
    authz.authorize(alice, "get", PODS, "log", "metallo-demo", "p")  # runs.read keeps reading logs
    current["g"] = parse_governance(GOVERNANCE.replace("m-alice: [runs.launch, runs.read, runs.cancel]",
                                                       "m-carol: [runs.read]"))  # alice left the Project
    with pytest.raises(ApiError):
        authz.authorize(alice, "get", PODS, "log", "metallo-demo", "p")


def test_impersonation_is_limited_to_the_sites_members():
    authz = Authorizer([Token("t", RUNTIME)], lambda: layout_from(parse_governance(GOVERNANCE), "lab-k8s").policy)
    assert authz.authenticate({"Authorization": "Bearer t"}) == RUNTIME
    with pytest.raises(ApiError) as e:
        authz.authenticate({"Authorization": "Bearer nope"})
    assert e.value.code == 401
    with pytest.raises(ApiError) as e:
        authz.impersonate(RUNTIME, headers(Impersonate_User="carol"))
    assert e.value.reason == "Forbidden" and 'users "carol" is forbidden' in e.value.message
    user = authz.impersonate(RUNTIME, CIMultiDictProxy(CIMultiDict(
        [("Impersonate-User", "alice"), ("Impersonate-Group", "metallo:members")])))
    assert user == UserInfo("alice", ("metallo:members", "system:authenticated"))
    with pytest.raises(ApiError):
        authz.impersonate(RUNTIME, headers(Impersonate_Group="metallo:members"))  # a group needs a user


def test_the_runtime_deletes_grant_secrets_but_never_reads_them():
    from metallo.labs.kubernetes.resources import SECRETS

    authz = Authorizer([Token("t", RUNTIME)], lambda: layout_from(parse_governance(GOVERNANCE), "lab-k8s").policy)
    authz.authorize(RUNTIME, "delete", SECRETS, None, "metallo-demo", "s")
    authz.authorize(RUNTIME, "deletecollection", SECRETS, None, "metallo-demo", None)
    for verb, name in (("get", "s"), ("list", None), ("watch", None)):
        with pytest.raises(ApiError) as e:
            authz.authorize(RUNTIME, verb, SECRETS, None, "metallo-demo", name)
        assert e.value.code == 403
    with pytest.raises(ApiError):  # and deletes no other collection
        authz.authorize(RUNTIME, "deletecollection", PODS, None, "metallo-demo", None)
