"""Project-authority port over the development governance file (DESIGN.md, External owners)."""

from __future__ import annotations

from metallo.audit.query import audit_readable
from metallo.governance import GovernanceError, GovernanceFile
from pipeline_coordination.application.ports import AuthorityUnavailable


class GovernanceAuthority:
    """Answers from the governance file as it is now (re-read when it changes; never a cached verdict)."""

    def __init__(self, governance: GovernanceFile):
        self.governance = governance

    def allowed(self, project: str, member: str, capability: str) -> bool:
        """Whether ``member`` holds ``capability`` (e.g. ``pipelines.start``) in ``project``.

        Raises AuthorityUnavailable when the file is missing or invalid.
        """
        return self._current().has_capability(project, member, capability)

    def project_exists(self, project: str) -> bool:
        """Whether the governance file names ``project``. Raises AuthorityUnavailable."""
        return self._current().project(project) is not None

    def may_read_audit(self, project: str, member: str) -> bool:
        """``audit.read`` in the Project or operator ``platform.read`` now. Raises
        AuthorityUnavailable."""
        return audit_readable(self._current(), project, member)

    def _current(self):
        try:
            return self.governance.current()
        except GovernanceError as e:
            raise AuthorityUnavailable(f"the Project authority cannot answer: {e.problems[0]}") from None
