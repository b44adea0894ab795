"""Project-authority port over the development governance file (DESIGN.md, External owners).

Every call reads :meth:`metallo.governance.GovernanceFile.current`, which
re-reads the file when it changed, so a permission removed by the operator is
refused on the very next request (seed 004, Run access: never a cached verdict).
"""

from __future__ import annotations

from execution_core.application.ports import AuthorityUnavailable
from execution_core.domain.planning import Binding, SiteFacts
from metallo.audit.query import audit_readable
from metallo.governance import Governance, GovernanceError, GovernanceFile


class GovernanceAuthority:
    """:class:`~execution_core.application.ports.ProjectAuthority` backed by a GovernanceFile."""

    def __init__(self, governance: GovernanceFile):
        self.governance = governance

    def _current(self) -> Governance:
        try:
            return self.governance.current()
        except (GovernanceError, OSError) as exc:
            raise AuthorityUnavailable(f"governance file unreadable: {exc}") from exc

    def has_capability(self, project: str, member: str, capability: str) -> bool:
        """Whether the current file grants ``capability``; AuthorityUnavailable if unreadable."""
        return self._current().has_capability(project, member, capability)

    def project_exists(self, project: str) -> bool:
        """Whether the current file names the Project; AuthorityUnavailable if unreadable."""
        return self._current().project(project) is not None

    def is_member(self, project: str, member: str) -> bool:
        """Whether the current file lists ``member`` in ``project``; AuthorityUnavailable if
        unreadable."""
        p = self._current().project(project)
        return p is not None and member in p.members

    def project_run_limit(self, project: str) -> int | None:
        """The Project's ``concurrent_run_limit`` (None: unknown Project or unlimited)."""
        p = self._current().project(project)
        return None if p is None else p.concurrent_run_limit

    def sites_for(self, project: str) -> list[SiteFacts]:
        """The Project's Sites from the current file as :class:`SiteFacts`.

        ``max_wall_seconds`` is in seconds; raises AuthorityUnavailable if unreadable.
        """
        return [
            SiteFacts(
                site_id=site.id,
                environment=site.environment,
                ready=site.ready,
                max_wall_seconds=site.max_wall_seconds,
                gpu_classes=dict(site.gpu_classes),
                concurrent_run_limit=site.concurrent_run_limit,
            )
            for site in self._current().sites_for(project)
        ]

    def binding(self, member: str, site_id: str) -> Binding | None:
        """The member's Site account binding from the current file, or None."""
        b = self._current().binding(member, site_id)
        return None if b is None else Binding(site_username=b.site_username, account=b.account)

    def is_operator(self, member: str, capability: str) -> bool:
        """The ``operators`` section now; AuthorityUnavailable if unreadable."""
        return self._current().is_operator(member, capability)

    def site_known(self, site_id: str) -> bool:
        """Whether the current file names the Site; AuthorityUnavailable if unreadable."""
        return self._current().site(site_id) is not None

    def may_read_audit(self, project: str, member: str) -> bool:
        """``audit.read`` in the Project or operator ``platform.read`` now
        (:func:`metallo.audit.query.audit_readable`); AuthorityUnavailable if unreadable."""
        return audit_readable(self._current(), project, member)
