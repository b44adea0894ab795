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
    code = "permission-denied"


class GovernanceUnavailable(PortfolioError):
    code = "governance-unavailable"


class InvalidArgument(PortfolioError):
    code = "invalid-argument"


class NotFound(PortfolioError):
    code = "not-found"


class ActionNotFound(PortfolioError):
    code = "action-not-found"


class ActionsInvalid(PortfolioError):
    code = "actions-invalid"


class SourceError(PortfolioError):
    """Source control refused or failed. Codes: repository-not-found, branch-not-found,
    commit-not-found, file-not-found, source-unavailable (timeouts, network)."""

    code = "source-unavailable"
