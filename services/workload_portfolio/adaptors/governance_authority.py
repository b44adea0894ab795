"""Project-authority port over the development governance file (DESIGN.md, External owners)."""

from __future__ import annotations

from metallo.governance import GovernanceError, GovernanceFile
from workload_portfolio.domain.errors import (
    GovernanceUnavailable,
    PermissionDenied,
    PortfolioError,
)


class GovernanceProjectAuthority:
    """Answers from the governance file as it is now (re-read when it changes; never a cached verdict)."""

    def __init__(self, governance: GovernanceFile):
        self.governance = governance

    def check(self, project: str, member: str, any_of: tuple[str, ...]) -> None:
        """Return when ``member`` holds one of ``any_of`` in ``project``.

        Raises GovernanceUnavailable when the file is missing or invalid,
        PortfolioError ``project-not-found`` for a Project the file does not know (only
        that Project is named, never another), and PermissionDenied for a non-member or
        a member without any of the capabilities.
        """
        try:
            g = self.governance.current()
        except GovernanceError as e:
            raise GovernanceUnavailable(f"the Project authority cannot answer: {e.problems[0]}") from None
        known = g.project(project)
        if known is None:
            raise PortfolioError(f"Project {project} is unknown to the Project authority",
                                 code="project-not-found")
        if not any(g.has_capability(project, member, c) for c in any_of):
            outside = "" if member in known.members else f" (not a member of Project {project})"
            raise PermissionDenied(
                f"member {member} lacks {' or '.join(any_of)} in Project {project}{outside}"
            )
