"""Member tokens and repository grants for the slurm executor (seed 000; seed 001).

Two small ports, so tests can hand the executor their own sources:

* :class:`MemberTokens` — a fresh member access token for one Attempt
  (``POST /v1/attempts/{attempt_id}/member-token`` on the Site edge);
* :class:`RepositoryGrants` — a just-in-time Git credential per staging job
  (``POST /v1/attempts/{attempt_id}/repository-grants``) and its release
  (``DELETE /v1/repository-grants/{grant_id}``).

:class:`SiteEdgeAccess` implements both over HTTPS with the Runtime's ``psb_``
command grant, read afresh from its file for every request.  Failures raise
:class:`EdgeUnavailable` with a catalogued deferral code, or
:class:`EdgeRefused` when the edge definitely says no.  Secrets never appear in
a message or ``repr``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import httpx

from metallo.identity.verify import MemberCredential
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.log_reads import PermitRefused, PermitUnavailable
from site_runtime.application.site_access import RepositoryGrant


class MemberTokens(Protocol):
    """Source of member access tokens (seed 000, MemberCredentialDelegation)."""

    async def member_token(self, attempt_id: str) -> MemberCredential:
        """A fresh token for the Attempt's member; raise EdgeUnavailable/EdgeRefused."""
        ...


class ExecutionAuthority(Protocol):
    """Current authority for a new native effect (seed 001, authorise)."""

    async def authorise_execution(self, request: dict[str, Any]) -> dict[str, Any]:
        """Raise EdgeRefused when refused, EdgeUnavailable when it cannot be confirmed."""
        ...


class RepositoryGrants(Protocol):
    """Source of per-stage repository credentials (seed 000, RepositoryGrants)."""

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        """Issue a grant for ``direction`` (``stage-in`` or ``stage-out``)."""
        ...

    async def release(self, grant_id: str) -> None:
        """Revoke a grant; releasing an unknown grant is not an error."""
        ...


@dataclass
class SiteEdgeAccess:
    """Both ports over the Site edge (HTTPS, ``Authorization: Bearer psb_...``).

    ``credential_file`` holds the grant (read on every request); ``ca_file`` the
    edge's CA; member tokens are reused until ``renew_seconds`` before expiry.
    """

    base_url: str
    credential_file: Path | None
    ca_file: str | None = None
    credential: str | None = field(default=None, repr=False)
    timeout_seconds: float = 10.0
    renew_seconds: float = 120.0
    clock: Callable[[], float] = time.time
    _tokens: dict[str, tuple[float, MemberCredential]] = field(default_factory=dict, repr=False)
    _http: httpx.AsyncClient | None = field(default=None, repr=False)

    def _client(self) -> httpx.AsyncClient:
        # One pooled client: a new one per request paid a TLS handshake every time
        # (several per Slurm Run, on both sides).
        if self._http is None or self._http.is_closed:
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self.timeout_seconds,
                follow_redirects=False,
                trust_env=False,
                verify=self.ca_file if self.ca_file else True,
            )
        return self._http

    async def aclose(self) -> None:
        """Close the pooled connection(s); the next request opens new ones."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _auth(self) -> dict[str, str]:
        if self.credential_file is None:
            grant = (self.credential or "").strip()
            if not grant.startswith("psb_"):
                raise EdgeUnavailable(
                    "no psb_ Site credential is configured", "site-edge-unreachable"
                )
            return {"Authorization": f"Bearer {grant}"}
        try:
            grant = Path(self.credential_file).read_text().strip()
        except OSError:
            raise EdgeUnavailable(
                "the Site credential file cannot be read", "site-edge-unreachable"
            ) from None
        return {"Authorization": f"Bearer {grant}"}

    async def _request(self, method: str, path: str, code: str, json: Any = None) -> httpx.Response:
        try:
            return await self._client().request(method, path, json=json, headers=self._auth())
        except httpx.HTTPError as error:
            raise EdgeUnavailable(
                f"the Site edge cannot be reached ({type(error).__name__})", code
            ) from None

    async def member_token(self, attempt_id: str) -> MemberCredential:
        """See :class:`MemberTokens`."""
        cached = self._tokens.get(attempt_id)
        if cached and cached[0] - self.renew_seconds > self.clock():
            return cached[1]
        response = await self._request(
            "POST", f"/v1/attempts/{attempt_id}/member-token", "identity-provider-unavailable"
        )
        body = _checked(response, "identity-provider-unavailable")
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise EdgeUnavailable("the edge returned no token", "identity-provider-unavailable")
        credential = MemberCredential(token)
        self._tokens[attempt_id] = (_timestamp(body.get("expires_at"), self.clock()), credential)
        return credential

    async def authorise_execution(self, request: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/authorisations/execution`` (seed 001): the saved material, or
        :class:`EdgeRefused` (``authorisation-refused``) / :class:`EdgeUnavailable`
        (``authority-unavailable``). Used once for the immediate effect, never cached."""
        response = await self._request(
            "POST", "/v1/authorisations/execution", "authority-unavailable", json=request
        )
        return _checked(response, "authority-unavailable")

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        """See :class:`RepositoryGrants`."""
        response = await self._request(
            "POST",
            f"/v1/attempts/{attempt_id}/repository-grants",
            "repository-unavailable",
            json={"direction": direction},
        )
        body = _checked(response, "repository-unavailable")
        try:
            return RepositoryGrant.from_answer(body)
        except KeyError:
            raise EdgeUnavailable(
                "the grant answer is incomplete", "repository-unavailable"
            ) from None

    async def release(self, grant_id: str) -> None:
        """See :class:`RepositoryGrants`."""
        response = await self._request(
            "DELETE", f"/v1/repository-grants/{grant_id}", "repository-unavailable"
        )
        if response.status_code in (200, 204, 404):
            return
        _checked(response, "repository-unavailable")

    async def authorise_read(self, request: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/authorisations/read`` → a viewer read permit (seed 001, Private
        reads). Raises PermitRefused (edge code and reason) or PermitUnavailable."""
        return await self._permit("/v1/authorisations/read", request)

    async def check_read_permit(self, permit_id: str) -> dict[str, Any]:
        """``POST /v1/read-permits/{permit_id}/check`` → the permit, confirmed now."""
        if not permit_id or "/" in permit_id or len(permit_id) > 128:
            raise PermitRefused("read-permit-not-found")
        return await self._permit(f"/v1/read-permits/{permit_id}/check", None)

    async def _permit(self, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        try:
            response = await self._request("POST", path, "authority-unavailable", json=body)
            return _checked(response, "authority-unavailable")
        except EdgeUnavailable:
            raise PermitUnavailable(path) from None
        except EdgeRefused as refused:
            raise PermitRefused(refused.code, refused.reason) from None


def _checked(response: httpx.Response, code: str) -> dict[str, Any]:
    if response.status_code in (200, 201):
        try:
            body = response.json()
        except ValueError:
            raise EdgeUnavailable("the edge answer is not JSON", code) from None
        if isinstance(body, dict):
            return body
        raise EdgeUnavailable("the edge answer is not an object", code)
    if response.status_code in (400, 403, 404, 409, 422):
        error_code, reason = "edge-refused", None
        try:
            error = response.json()["error"]
            error_code = str(error["code"])
            reason = error.get("reason")
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        raise EdgeRefused(
            response.status_code,
            error_code,
            f"the Site edge refused (HTTP {response.status_code})",
            reason if isinstance(reason, str) else None,
        )
    raise EdgeUnavailable(f"the Site edge answered HTTP {response.status_code}", code)


def _timestamp(value: Any, now: float) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            pass
    return now + 300.0
