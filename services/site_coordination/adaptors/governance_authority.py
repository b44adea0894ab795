"""Project authority from the governance file (the Beto/Waldur development adapter;
DESIGN.md, External owners are ports). Read afresh on every question: the file
object re-reads the YAML when it changes, and nothing here caches a verdict.
"""

from __future__ import annotations

from pathlib import Path

from metallo.audit.query import audit_readable
from metallo.governance import GovernanceError, GovernanceFile
from site_coordination.application.ports import AuthorityUnavailable
from site_coordination.domain.authorisation import AuthorityFacts

CAPABILITIES = (
    "runs.launch", "runs.read", "runs.cancel", "pipelines.start", "pipelines.read",
    "pipelines.stop", "workloads.prepare", "workloads.read",
)


class GovernanceAuthority:
    """:class:`ProjectAuthority` over ``metallo.governance.GovernanceFile``."""

    def __init__(self, path: Path) -> None:
        self.file = GovernanceFile(path)

    def facts(self, project_id: str, member_id: str, site_id: str) -> AuthorityFacts:
        """What the governance file says now; :class:`AuthorityUnavailable` when invalid."""
        try:
            g = self.file.current()
        except GovernanceError as exc:  # invalid or unreadable: temporary, not a denial
            raise AuthorityUnavailable("the governance file is unusable") from exc
        project = g.project(project_id)
        if project is None:
            return AuthorityFacts(False, False, False, frozenset(), None)
        binding = g.binding(member_id, site_id)
        is_member = member_id in set(project.members)
        capabilities = frozenset(
            c for c in CAPABILITIES if is_member and g.has_capability(project_id, member_id, c)
        )
        return AuthorityFacts(
            project_known=True,
            site_in_project=site_id in set(project.sites),
            is_member=is_member,
            capabilities=capabilities,
            binding=(binding.site_username, binding.account) if binding else None,
        )

    def is_operator(self, member_id: str, capability: str) -> bool:
        """The governance file's ``operators`` section now (:class:`OperatorAuthority`)."""
        return self._current().is_operator(member_id, capability)

    def site_environment(self, site_id: str) -> str | None:
        """The governed Site's environment, None when the file has no such Site."""
        site = self._current().site(site_id)
        return None if site is None else site.environment

    def may_read_audit(self, project: str, member: str) -> bool:
        """``audit.read`` in the Project or operator ``platform.read`` now;
        :class:`AuthorityUnavailable` when the file is unusable."""
        return audit_readable(self._current(), project, member)

    def _current(self):
        try:
            return self.file.current()
        except GovernanceError as exc:  # invalid or unreadable: temporary, not a denial
            raise AuthorityUnavailable("the governance file is unusable") from exc
