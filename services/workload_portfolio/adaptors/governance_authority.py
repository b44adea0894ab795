"""Project-authority port over the development governance file (DESIGN.md, External owners)."""

from __future__ import annotations

from metallo.governance import GovernanceError, GovernanceFile
from workload_portfolio.domain.errors import GovernanceUnavailable, PermissionDenied


class GovernanceProjectAuthority:
    """Answers from the governance file as it is now (re-read when it changes; never a cached verdict)."""

    def __init__(self, governance: GovernanceFile):
        self.governance = governance

    def check(self, project: str, member: str, any_of: tuple[str, ...]) -> None:
        """Return when ``member`` holds one of ``any_of`` in ``project``.

        Raises GovernanceUnavailable when the file is missing or invalid, and
        PermissionDenied for an unknown Project, a non-member or a member without
        any of the capabilities.
        """
        try:
            g = self.governance.current()
        except GovernanceError as e:
            raise GovernanceUnavailable(f"the Project authority cannot answer: {e.problems[0]}") from None
        if g.project(project) is None:
            raise PermissionDenied(f"member {member} may not act in Project {project}")
        if not any(g.has_capability(project, member, c) for c in any_of):
            raise PermissionDenied(
                f"member {member} lacks {' or '.join(any_of)} in Project {project}"
            )
