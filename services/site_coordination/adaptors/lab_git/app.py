"""The lab Git server as an ASGI application (seed 001, Repository grants).

- ``GET /git/<repo>/info/refs?service=…``, ``POST /git/<repo>/git-upload-pack`` and
  ``POST /git/<repo>/git-receive-pack``: git smart HTTP through ``git http-backend``.
  HTTP Basic: username = repository grant username, password = its ``prt_`` token;
  stage-in grants may fetch only, stage-out grants may fetch and push, each only its
  own repository. The operator (username ``operator``) may do everything.
- ``PUT /git-admin/repositories/<repo>``: the operator creates a bare repository.

Refusals: 401 (unknown, expired, revoked or missing credential, or a grant whose
Attempt has ended), 403 (another
repository, or push with a stage-in grant), 404 (no such repository or route).
They are logged with the username and reason, never the token.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from site_coordination.adaptors.edge.caller import printable
from site_coordination.adaptors.lab_git.http_backend import BodyTooLarge, run_http_backend
from site_coordination.adaptors.lab_git.repositories import create_repository
from site_coordination.adaptors.lab_git.tokens import Access, TokenRefused, check_token

log = logging.getLogger("site_coordination.lab_git")

OPERATOR = "operator"
_GIT = re.compile(
    r"^/git/(?P<repo>(?:[A-Za-z0-9][A-Za-z0-9._-]{0,99}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.git)"
    r"/(?P<rest>info/refs|git-upload-pack|git-receive-pack)$"
)
_ADMIN = re.compile(r"^/git-admin/repositories/(?P<repo>[^?]+)$")


@dataclass
class LabGitSettings:
    """Where repositories live, the operator's token, and the push bound (bytes)."""

    root: Path
    operator_token: str
    max_body_bytes: int = 1024 * 1024 * 1024


async def _respond(send, status: int, message: str, *, challenge: bool = False) -> None:
    body = json.dumps({"error": {"code": message, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if challenge:
        headers.append((b"www-authenticate", b'Basic realm="metallo-lab-git"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _basic(scope) -> tuple[str, str] | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, encoded = value.decode("latin-1").partition(" ")
            if scheme.lower() != "basic":
                return None
            try:
                decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            user, sep, password = decoded.partition(":")
            return (user, password) if sep else None
    return None


class LabGitApp:
    """ASGI app serving the lab repositories (see module doc)."""

    def __init__(self, settings: LabGitSettings, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.settings = settings
        self.sessions = sessions

    async def _access(self, scope) -> tuple[Access | None, str]:
        """The credential's access, or None and why (a code safe to log)."""
        credential = _basic(scope)
        if credential is None:
            return None, "credential-refused"
        user, password = credential
        if user == OPERATOR:
            if self.settings.operator_token and hmac.compare_digest(
                password.encode(), self.settings.operator_token.encode()
            ):
                return Access(username=OPERATOR, repository_path=None, write=True), ""
            return None, "credential-refused"
        try:
            async with self.sessions() as session:
                return await check_token(session, user, password), ""
        except TokenRefused as exc:
            return None, exc.reason

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        method = scope["method"]
        admin = _ADMIN.match(path)
        git = _GIT.match(path)
        if not admin and not git:
            await _respond(send, 404, "not-found")
            return
        access, reason = await self._access(scope)
        if access is None:
            # git asks without credentials first and sends them after the 401 challenge:
            # only a refused credential is worth an operator's attention.
            presented = any(k.lower() == b"authorization" for k, _ in scope.get("headers", []))
            log.log(logging.INFO if presented else logging.DEBUG,
                    "lab git refused %s %s: %s%s", method, printable(path), reason,
                    "" if presented else " (no credential yet; git retries with one)")
            # Finer codes (revoked, expired, attempt-ended) come only after the token's
            # hash matched: only its holder learns them.
            await _respond(send, 401, reason if reason.startswith(("token-", "attempt-"))
                           and reason != "token-unknown" else "credential-refused",
                           challenge=True)
            return
        if admin:
            await self._admin(access, method, admin.group("repo"), send)
            return
        repo, rest = git.group("repo"), git.group("rest")
        query = scope.get("query_string", b"").decode("latin-1")
        if rest == "info/refs":
            if method != "GET":
                await _respond(send, 405, "method-not-allowed")
                return
            service = dict(p.partition("=")[::2] for p in query.split("&") if p).get("service")
            if service not in ("git-upload-pack", "git-receive-pack"):
                await _respond(send, 403, "smart-http-only")
                return
        else:
            if method != "POST":
                await _respond(send, 405, "method-not-allowed")
                return
            service = rest
        if access.repository_path is not None and access.repository_path != repo:
            log.info("lab git refused %s for %s: wrong-repository", access.username, repo)
            await _respond(send, 403, "wrong-repository")
            return
        if service == "git-receive-pack" and not access.write:
            log.info("lab git refused %s for %s: read-only-grant", access.username, repo)
            await _respond(send, 403, "read-only-grant")
            return
        if not (self.settings.root / repo / "HEAD").is_file():
            await _respond(send, 404, "repository-not-found")
            return
        try:
            await run_http_backend(scope, receive, send, project_root=self.settings.root,
                                   path_info=f"/{repo}/{rest}", remote_user=access.username,
                                   max_body_bytes=self.settings.max_body_bytes)
        except BodyTooLarge:
            log.info("lab git refused %s for %s: body-too-large", access.username, repo)

    async def _admin(self, access: Access, method: str, repo: str, send) -> None:
        if access.username != OPERATOR:
            await _respond(send, 403, "operator-only")
            return
        if method != "PUT":
            await _respond(send, 405, "method-not-allowed")
            return
        try:
            _, created = create_repository(self.settings.root, repo)
        except ValueError:
            await _respond(send, 422, "invalid-repository-name")
            return
        await _respond(send, 201 if created else 200, "created" if created else "exists")


def compose(edge_app, git_app: LabGitApp | None):
    """One ASGI app: ``/git/…`` and ``/git-admin/…`` go to ``git_app`` (when configured),
    everything else (and lifespan) to ``edge_app``."""
    if git_app is None:
        return edge_app

    async def app(scope, receive, send):
        if scope["type"] == "http" and (
            scope["path"].startswith("/git/") or scope["path"].startswith("/git-admin/")
        ):
            await git_app(scope, receive, send)
        else:
            await edge_app(scope, receive, send)

    return app
