"""The governance snapshot: Projects, members, bindings and Sites (immutable values).

This is the development adapter's view of what the Project authority (Beto) and
provisioning (Waldur) own (DESIGN.md, External owners). Every value is frozen so a
snapshot handed out by :class:`~metallo.governance.file.GovernanceFile` can be
shared between tasks without copying.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

Capability = Literal[
    "runs.launch", "runs.read", "runs.cancel", "runs.rerun",
    "pipelines.start", "pipelines.read", "pipelines.stop",
    "workloads.prepare", "workloads.read", "audit.read",
]

CAPABILITIES: tuple[str, ...] = (
    "runs.launch", "runs.read", "runs.cancel", "runs.rerun",
    "pipelines.start", "pipelines.read", "pipelines.stop",
    "workloads.prepare", "workloads.read", "audit.read",
)

# Platform-wide operator capabilities (the governance file's ``operators`` section),
# held by a member regardless of Project: they act on Sites and the whole platform.
OperatorCapability = Literal["sites.grants", "sites.drain", "platform.read"]
OPERATOR_CAPABILITIES: tuple[str, ...] = ("sites.grants", "sites.drain", "platform.read")


@dataclass(frozen=True)
class Binding:
    """A member's account at one Site: Unix ``site_username`` and Slurm ``account``."""

    site_username: str
    account: str


@dataclass(frozen=True)
class Member:
    """A member: stable ``id`` (e.g. ``m-alice``), display ``name``, bindings by Site id,
    and ``oidc_subject``: the ``sub`` of the member's access tokens at the platform's
    member-token issuer (None: the member cannot authenticate on the command bus)."""

    id: str
    name: str
    bindings: Mapping[str, Binding] = field(default_factory=lambda: MappingProxyType({}))
    oidc_subject: str | None = None


@dataclass(frozen=True)
class Site:
    """A Site with its environment, readiness and limits.

    max_wall_seconds: longest wall time a Run may ask for (seconds), None = no limit.
    concurrent_run_limit: most active Runs on the Site, None = no limit.
    gpu_classes: GPU class (``resources.gpuClass``) → Slurm GRES type, e.g. ``gpu:a100``.
    """

    id: str
    name: str
    environment: Literal["slurm", "k8s"]
    ready: bool
    max_wall_seconds: int | None = None
    concurrent_run_limit: int | None = None
    gpu_classes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Project:
    """A Project: its members (ids), provisioned Sites (ids), limit and capabilities.

    capabilities: member id → frozenset of capability names held in this Project.
    """

    id: str
    name: str
    members: tuple[str, ...]
    sites: tuple[str, ...]
    concurrent_run_limit: int | None
    capabilities: Mapping[str, frozenset[str]]


@dataclass(frozen=True)
class Governance:
    """One consistent snapshot of a governance file.

    Queries never raise for unknown ids: they answer None, False or an empty list,
    so callers refuse with their own stable codes.
    """

    projects: Mapping[str, Project]
    members: Mapping[str, Member]
    sites: Mapping[str, Site]
    operators: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))

    def project(self, project_id: str) -> Project | None:
        """The Project with this id, or None."""
        return self.projects.get(project_id)

    def member(self, member_id: str) -> Member | None:
        """The member with this id, or None."""
        return self.members.get(member_id)

    def site(self, site_id: str) -> Site | None:
        """The Site with this id, or None."""
        return self.sites.get(site_id)

    def has_capability(self, project_id: str, member_id: str, capability: str) -> bool:
        """Whether ``member_id`` currently holds ``capability`` in ``project_id``.

        False for an unknown Project, a non-member or an unknown capability name
        (seed 004, "Run access with current Project permissions").
        """
        p = self.projects.get(project_id)
        if p is None:
            return False
        return capability in p.capabilities.get(member_id, frozenset())

    def is_operator(self, member_id: str, capability: str) -> bool:
        """Whether ``member_id`` currently holds the platform-wide operator
        ``capability`` (``sites.grants``, ``sites.drain``, ``platform.read``);
        False for an unknown member or capability."""
        return capability in self.operators.get(member_id, frozenset())

    def member_for_subject(self, subject: str) -> Member | None:
        """The member whose ``oidc_subject`` is ``subject`` (seed 002 AUTH-01: the
        issuer and subject pair, never a username), or None."""
        for m in self.members.values():
            if m.oidc_subject is not None and m.oidc_subject == subject:
                return m
        return None

    def binding(self, member_id: str, site_id: str) -> Binding | None:
        """The member's account binding at the Site, or None."""
        m = self.members.get(member_id)
        return None if m is None else m.bindings.get(site_id)

    def sites_for(self, project_id: str) -> list[Site]:
        """The Project's provisioned Sites in file order ([] for an unknown Project)."""
        p = self.projects.get(project_id)
        if p is None:
            return []
        return [self.sites[s] for s in p.sites if s in self.sites]
