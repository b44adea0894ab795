"""What an executor asks the Site edge for (seed 001; seed 000): execution
authorisation and Run-scoped repository grants. ``adaptors/edge_client.py``
implements both over HTTPS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class RepositoryGrant:
    """A just-in-time repository identity for one stage; ``token`` is hidden from
    ``repr`` and must never be logged, journaled or put on a command line."""

    grant_id: str
    username: str
    token: str = field(repr=False)
    repository_url: str
    expires_at: str


class ExecutionAuthority(Protocol):
    """``POST /v1/authorisations/execution`` (seed 001, authorise): used once for the
    immediate effect, never cached as a verdict."""

    async def authorise_execution(self, request: dict[str, str]) -> dict[str, Any]:
        """``request``: run_id, attempt_id, material_digest, member_id, site_username,
        account. Returns the saved material; raises EdgeRefused
        (``authorisation-refused``) or EdgeUnavailable (``authority-unavailable``)."""
        ...


class ExecutionAuthorityWithGrant(ExecutionAuthority, Protocol):
    """An authority that can also issue the Attempt's repository grant in the same
    decision (one round trip; the Site edge's ``repository_grant`` field)."""

    async def authorise_with_grant(
        self, request: dict[str, str], direction: str
    ) -> tuple[dict[str, Any], RepositoryGrant]:
        """(material, grant); raises EdgeRefused (``authorisation-refused`` or the
        grant's code; nothing issued) or EdgeUnavailable (``authority-unavailable``)."""
        ...


class RepositoryGrants(Protocol):
    """Per-stage repository identities (seed 001, Repository grants)."""

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        """Issue a ``stage-in`` (fetch) or ``stage-out`` (fetch + push) identity."""
        ...

    async def release(self, grant_id: str) -> None:
        """Revoke it; an unknown grant counts as released."""
        ...

    async def release_many(self, grant_ids: list[str]) -> dict[str, str]:
        """Revoke up to 100 at once → ``{grant_id: "revoked" | "not-found" |
        "forbidden"}``; an id missing from the answer was not revoked."""
        ...
