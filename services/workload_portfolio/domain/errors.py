"""Stable refusal codes of the Workload Portfolio (docs/actions.md, docs/messaging.md)."""

from __future__ import annotations


class PortfolioError(Exception):
    """A definite refusal with a stable ``code`` and a human ``message``.

    details: extra key → text pairs (e.g. one entry per actions.yaml problem).
    """

    code = "invalid-argument"

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or {}


class PermissionDenied(PortfolioError):
    """The member lacks the capability in the Project now (``permission-denied``)."""

    code = "permission-denied"


class GovernanceUnavailable(PortfolioError):
    """The Project authority cannot answer now (``governance-unavailable``; retry later)."""

    code = "governance-unavailable"


class InvalidArgument(PortfolioError):
    """A malformed or out-of-range request field (``invalid-argument``)."""

    code = "invalid-argument"


class NotFound(PortfolioError):
    """No such Workload or revision in the Project (``not-found``)."""

    code = "not-found"


class ActionNotFound(PortfolioError):
    """The named action is not in ``actions.yaml`` at that commit (``action-not-found``)."""

    code = "action-not-found"


class ActionsInvalid(PortfolioError):
    """``actions.yaml`` is too large or invalid (``actions-invalid``).

    ``details`` holds one ``problem.NNN`` entry per shown problem and the ``commit``.
    """

    code = "actions-invalid"


class SourceError(PortfolioError):
    """Source control refused or failed. Codes: repository-not-found, branch-not-found,
    commit-not-found, file-not-found, source-unavailable (timeouts, network)."""

    code = "source-unavailable"
