"""Per-grant repository tokens of the lab Git server, and the Source Control port's
lab adapter that issues and revokes them (seed 001, Repository grants).

A stage-in grant may fetch; a stage-out grant may fetch and push; each names one
repository path (``demo.git`` or ``group/demo.git``). Tokens are stored as SHA-256.
A token is refused once its grant's Attempt has ended — a result that ends the
Attempt, a later Attempt of its Run, or its Run's ``RunCompleted`` — even before the
grant is revoked.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from sqlalchemy import bindparam, exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from metallo.persistence.prebuilt import set_clause
from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.adaptors.tables import (
    ended_attempts,
    ended_runs,
    lab_git_tokens,
    repository_grants,
)
from site_coordination.application.ports import IssuedCredential
from site_coordination.domain.errors import Conflict
from site_coordination.domain.grants import is_repository_token, new_repository_token, secret_hash

GIT_PREFIX = "/git/"
# Built once (ADR 0013): every lab Git request checks a token.
# The token, whether it is live, and its repository grant's Attempt and Run end.
_TOKEN = select(
    lab_git_tokens, (lab_git_tokens.c.expires_at > func.now()).label("live"),
    repository_grants.c.attempt_id,
    exists().where(ended_runs.c.run_id == repository_grants.c.run_id).label("run_ended"),
    exists().where(ended_attempts.c.attempt_id == repository_grants.c.attempt_id)
    .label("attempt_ended"),
).select_from(lab_git_tokens.outerjoin(
    repository_grants, repository_grants.c.grant_id == lab_git_tokens.c.username,
)).where(lab_git_tokens.c.username == bindparam("w_username"))
_ISSUE = lab_git_tokens.insert().values(**set_clause(
    lab_git_tokens, ("username", "token_sha256", "repository_path", "access", "expires_at")))
_REVOKE = update(lab_git_tokens).where(
    (lab_git_tokens.c.username == bindparam("w_username")) & lab_git_tokens.c.revoked_at.is_(None)
).values(revoked_at=func.now())
_REPO = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,99}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.git$")


def repository_path(url_or_path: str) -> str | None:
    """The lab repository path (``demo.git``) of a lab URL or ``/git/…`` path, or None."""
    path = urlsplit(url_or_path).path if "://" in url_or_path else url_or_path
    if not path.startswith(GIT_PREFIX):
        return None
    rest = path[len(GIT_PREFIX):].rstrip("/")
    if ".." in rest or not _REPO.match(rest):
        return None
    return rest


class LabSourceControl:
    """:class:`SourceControl` writing lab Git tokens in the caller's transaction."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def issue(self, repository_url: str, direction: str, grant_id: str,
                    expires_at: datetime) -> IssuedCredential:
        """Issue a token for ``repository_url``; read for stage-in, write for stage-out.

        Raises :class:`Conflict` ``repository-not-served`` for a URL outside the lab server.
        """
        repo = repository_path(repository_url)
        if repo is None:
            raise Conflict("repository-not-served",
                           "the saved repository is not served by the lab Git server")
        token = new_repository_token()
        await self.session.execute(_ISSUE, {
            "v_username": grant_id, "v_token_sha256": secret_hash(token),
            "v_repository_path": repo, "v_access": "write" if direction == "stage-out" else "read",
            "v_expires_at": expires_at,
        })
        return IssuedCredential(username=grant_id, token=token, provider_ref=grant_id)

    async def revoke(self, provider_ref: str) -> None:
        """``UPDATE lab_git_tokens SET revoked_at = now()`` for the token named ``provider_ref``."""
        await self.session.execute(_REVOKE, {"w_username": provider_ref})


@dataclass(frozen=True)
class Access:
    """A checked credential: who, which repository, read or write."""

    username: str
    repository_path: str | None  # None: the operator, every repository
    write: bool


class TokenRefused(Exception):
    """The token may not be used; ``reason`` is a stable code, safe to log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def check_token(session: AsyncSession, username: str, token: str) -> Access:
    """The token's access when it is known, unexpired (PostgreSQL's clock), unrevoked
    and its grant's Attempt has not ended.

    Raises :class:`TokenRefused` ``token-unknown`` / ``-revoked`` / ``-expired`` /
    ``attempt-ended``.
    """
    if not is_repository_token(token):
        raise TokenRefused("token-unknown")
    row = (await session.execute(_TOKEN, {"w_username": username})).first()
    if row is None or not hmac.compare_digest(row.token_sha256, secret_hash(token)):
        raise TokenRefused("token-unknown")
    if row.revoked_at is not None:
        raise TokenRefused("token-revoked")
    if not row.live:
        raise TokenRefused("token-expired")
    if row.run_ended or row.attempt_ended:
        raise TokenRefused("attempt-ended")
    if row.attempt_id is not None:
        found = await PostgresSiteStore(session).attempt(row.attempt_id)
        if found is not None and found[1].completed:
            raise TokenRefused("attempt-ended")
    return Access(username=username, repository_path=row.repository_path,
                  write=row.access == "write")
