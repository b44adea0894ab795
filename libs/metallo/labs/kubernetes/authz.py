"""Authentication, impersonation and RBAC as the API server applies them.

- Bearer tokens name a user (the Runtime's service account, the lab administrator).
- ``Impersonate-User``/``Impersonate-Group`` switch to a member, but only when the
  caller's rules allow the ``impersonate`` verb on ``users``/``groups`` with that
  resource name (``Impersonate-Uid`` and ``Impersonate-Extra-*`` are refused: no
  rule grants them).
- RBAC: ``system:masters`` may do anything; otherwise a request needs a cluster rule
  or a rule of the request's namespace for the user that matches verb, API group,
  resource (``pods/log`` for a subresource) and, when given, resource name.
Refusals are 403 Forbidden ``Status`` bodies worded as the API server words them.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from multidict import CIMultiDictProxy

from metallo.labs.kubernetes import errors
from metallo.labs.kubernetes.resources import ResourceType
from metallo.labs.kubernetes.store import UserInfo

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class Rule:
    """One PolicyRule: verbs, apiGroups, resources (``*`` matches all), resourceNames."""

    verbs: frozenset[str]
    api_groups: frozenset[str]
    resources: frozenset[str]
    resource_names: frozenset[str] = frozenset()

    def allows(self, verb: str, group: str, resource: str, name: str | None) -> bool:
        if not ({"*", verb} & self.verbs and {"*", group} & self.api_groups
                and {"*", resource} & self.resources):
            return False
        return not self.resource_names or (name is not None and name in self.resource_names)


def rule(verbs: str, groups: str, resources: str, names: tuple[str, ...] | frozenset[str] = ()) -> Rule:
    """``rule("get,list", ",batch", "pods,jobs")``: comma-separated sets."""
    split = lambda s: frozenset(s.split(","))  # noqa: E731
    return Rule(split(verbs), split(groups), split(resources), frozenset(names))


@dataclass(frozen=True)
class Policy:
    """Who may do what: cluster-wide rules per user and namespace rules per (namespace, user)."""

    cluster: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
    namespaced: Mapping[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Token:
    """A bearer token and the user it authenticates."""

    secret: str
    user: UserInfo


class Authorizer:
    """Checks every request; ``policy`` is called per request so governance changes
    (a member leaving a Project) apply at once."""

    def __init__(self, tokens: list[Token], policy: Callable[[], Policy]) -> None:
        self._tokens = tokens
        self._policy = policy

    def authenticate(self, headers: Mapping[str, str]) -> UserInfo:
        """The token's user; 401 Unauthorized without a known bearer token."""
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            raise errors.unauthorized()
        presented = auth[len("Bearer "):].strip().encode()
        for token in self._tokens:
            if hmac.compare_digest(presented, token.secret.encode()):
                return token.user
        raise errors.unauthorized()

    def impersonate(self, user: UserInfo, headers: CIMultiDictProxy[str]) -> UserInfo:
        """The user the request acts as after ``Impersonate-*`` headers (403 when not allowed)."""
        target = headers.get("Impersonate-User")
        groups = [g.strip() for g in headers.getall("Impersonate-Group", [])]
        extras = [h for h in headers if h.lower().startswith("impersonate-extra-") or h.lower() == "impersonate-uid"]
        if target is None:
            if groups or extras:
                raise errors.bad_request("impersonating groups or extra fields requires impersonating a user")
            return user
        self._may_impersonate(user, "users", target)
        for g in groups:
            self._may_impersonate(user, "groups", g)
        for h in extras:
            resource = "uids" if h.lower() == "impersonate-uid" else "userextras"
            self._may_impersonate(user, resource, headers[h])
        return UserInfo(target, tuple(dict.fromkeys([*groups, AUTHENTICATED])))

    def _may_impersonate(self, user: UserInfo, resource: str, name: str) -> None:
        if not self._allowed(user, "impersonate", "", resource, None, name):
            raise errors.forbidden(resource, "", name, f'User "{user.name}" cannot impersonate resource '
                                   f'"{resource}" in API group "" at the cluster scope')

    def authorize(self, user: UserInfo, verb: str, rtype: ResourceType, subresource: str | None,
                  namespace: str | None, name: str | None) -> None:
        """403 Forbidden unless ``user`` may ``verb`` the resource."""
        resource = f"{rtype.plural}/{subresource}" if subresource else rtype.plural
        if self._allowed(user, verb, rtype.group, resource, namespace, name):
            return
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        raise errors.forbidden(rtype.plural, rtype.group, name,
                               f'User "{user.name}" cannot {verb} resource "{resource}" in API group '
                               f'"{rtype.group}" {where}')

    def allowed(self, user: UserInfo, verb: str, group: str, resource: str, namespace: str | None,
                name: str | None = None) -> bool:
        """Whether RBAC allows it (SelfSubjectAccessReview's answer)."""
        return self._allowed(user, verb, group, resource, namespace, name)

    def _allowed(self, user: UserInfo, verb: str, group: str, resource: str,
                 namespace: str | None, name: str | None) -> bool:
        if MASTERS in user.groups:
            return True
        policy = self._policy()
        rules = list(policy.cluster.get(user.name, ()))
        if namespace:
            rules += policy.namespaced.get((namespace, user.name), ())
        return any(r.allows(verb, group, resource, name) for r in rules)
