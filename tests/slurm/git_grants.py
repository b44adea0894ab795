"""Repository grants that expire, and an HTTPS Git server that honours them, for the
Slurm lab's grant-renewal test.

:class:`ExpiringGrants` is the Runtime's ``RepositoryGrants`` port with a short
lifetime (the edge's ``METALLO_REPOSITORY_GRANT_SECONDS``, shortened): each grant's
answer carries ``expires_at`` (ISO 8601, UTC). :class:`GrantedGitServer` is
:class:`tests.k8s.git_https.GitHttpsServer` whose HTTP Basic check accepts only a
grant that was issued, is not revoked and has not expired, as the lab Git server of
the dev stack does; ``pushes`` records which grant each accepted push used.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from site_runtime.application.site_access import RepositoryGrant
from tests.k8s.git_https import GitHttpsServer, _Handler


class ExpiringGrants:
    """Grants living ``lifetime`` seconds; ``issued`` and ``released`` as recorded."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.issued: list[RepositoryGrant] = []
        self.issued_at: dict[str, float] = {}
        self.released: list[str] = []
        self._lock = threading.Lock()

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        now = time.time()
        grant = RepositoryGrant(
            grant_id=f"g-{uuid.uuid4().hex[:12]}",
            username=f"grant-{direction}",
            token=f"prt_{uuid.uuid4().hex}",
            repository_url="https://unused",
            expires_at=datetime.fromtimestamp(now + self.lifetime, UTC).isoformat(),
        )
        with self._lock:
            self.issued.append(grant)
            self.issued_at[grant.grant_id] = now
        return grant

    async def release(self, grant_id: str) -> None:
        with self._lock:
            self.released.append(grant_id)

    def valid(self, username: str, token: str) -> str | None:
        """The id of the live grant with these credentials, None when there is none."""
        now = time.time()
        with self._lock:
            for grant in self.issued:
                if (grant.username, grant.token) == (username, token):
                    alive = now < self.issued_at[grant.grant_id] + self.lifetime
                    if alive and grant.grant_id not in self.released:
                        return grant.grant_id
        return None


class _GrantHandler(_Handler):
    server: GrantedGitServer  # type: ignore[assignment]

    def _user(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return None
        try:
            user, _, token = base64.b64decode(auth[6:]).decode().partition(":")
        except ValueError:
            return None
        grant_id = self.server.grants.valid(user, token)
        if grant_id is None:
            self.server.refused.append(user)
            return None
        if "git-receive-pack" in self.path:
            self.server.pushes.append(grant_id)
        return user


class GrantedGitServer(GitHttpsServer):
    """``GitHttpsServer`` accepting only ``grants``' live grants (module doc)."""

    def __init__(self, root: Path, grants: ExpiringGrants) -> None:
        super().__init__(root)
        self.RequestHandlerClass = _GrantHandler
        self.grants = grants
        self.pushes: list[str] = []
        self.refused: list[str] = []
