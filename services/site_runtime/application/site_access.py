"""What an executor asks the Site edge for (docs/site-commands.md, Transport):
execution authorisation, Run-scoped repository grants and member tokens.
``adaptors/edge/client.py`` implements them over HTTPS.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from metallo.identity.verify import MemberCredential
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable

#: HTTP statuses with which the edge says no for good; any other refusal (401 for a
#: credential being rotated, 429) may pass, so an executor defers instead.
DEFINITE_STATUSES = frozenset({400, 403, 404, 409, 422})


def definite(refused: EdgeRefused) -> bool:
    """True when ``refused`` is the edge's final answer (see :data:`DEFINITE_STATUSES`)."""
    return refused.status in DEFINITE_STATUSES


@dataclass(frozen=True)
class RepositoryGrant:
    """A just-in-time repository identity for one stage; ``token`` is hidden from
    ``repr`` and must never be logged, journaled or put on a command line."""

    grant_id: str
    username: str
    token: str = field(repr=False)
    repository_url: str
    expires_at: str

    @classmethod
    def from_answer(cls, body: dict[str, Any]) -> RepositoryGrant:
        """The grant as the Site edge answers it (``POST …/repository-grants``, or the
        ``repository_grant`` of an authorisation). Raises KeyError for a missing field;
        each edge adaptor turns that into its own "unavailable" error."""
        return cls(
            grant_id=str(body["grant_id"]),
            username=str(body["username"]),
            token=str(body["token"]),
            repository_url=str(body["repository_url"]),
            expires_at=str(body.get("expires_at", "")),
        )


class ExecutionAuthority(Protocol):
    """``POST /v1/authorisations/execution``: used once for the immediate effect,
    never cached as a verdict (docs/site-runtime.md, How a command is handled)."""

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


class MemberTokens(Protocol):
    """Fresh member access tokens for one Attempt (docs/slurm-lab.md, member tokens)."""

    async def member_token(self, attempt_id: str) -> MemberCredential:
        """A token for the Attempt's member; raises EdgeUnavailable or EdgeRefused.
        The token is never logged, journaled or put in an environment or script."""
        ...


class RepositoryGrants(Protocol):
    """Per-stage repository identities, released when their stage ends."""

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


async def release_each(
    release: Callable[[str], Awaitable[None]], grant_ids: list[str]
) -> dict[str, str]:
    """``release`` each grant in turn → the answers ``release_many`` gives: "revoked"
    (an unknown grant counts as released), "forbidden" for a 403 (another stream's);
    a grant refused for another reason is left out, so it is asked for again later.
    Raises EdgeUnavailable from ``release`` (the rest are not tried)."""
    answers: dict[str, str] = {}
    for grant_id in grant_ids:
        try:
            await release(grant_id)
        except EdgeRefused as refused:
            if refused.status == 403:
                answers[grant_id] = "forbidden"
        else:
            answers[grant_id] = "revoked"
    return answers


class GrantJournal(Protocol):
    """Where an executor records that a stage's grant was revoked."""

    def grant_released(self, attempt_id: str, stage: str) -> None:
        """The grant of the Attempt's ``stage`` (or object role) is revoked."""
        ...


async def release_stage_grant(
    grants: RepositoryGrants,
    journal: GrantJournal,
    attempt_id: str,
    stage: str,
    grant_id: str,
    log: logging.Logger,
) -> bool:
    """Revoke one stage's grant at the edge now and journal it: True when revoked; False
    (a warning on ``log``, the journal unchanged, so the next pass tries again) when the
    edge is unavailable or refuses now."""
    try:
        await grants.release(grant_id)
    except (EdgeUnavailable, EdgeRefused) as error:
        log.warning(
            "attempt %s: releasing the %s grant failed (%s); retried later",
            attempt_id,
            stage,
            type(error).__name__,
        )
        return False
    journal.grant_released(attempt_id, stage)
    return True
