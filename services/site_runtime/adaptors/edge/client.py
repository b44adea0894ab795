"""The one HTTPS client of the Site edge (docs/site-commands.md, Transport): the
worker's command stream and every executor's edge calls.

- TLS is always verified, against ``ca_file`` when given (the edge's CA) or the
  system store; no proxy from the environment, no redirects.
- The ``psb_`` command grant comes from ``credential_file`` — read afresh for every
  request, so an operator can rotate it without a restart — or from a value given
  at construction (``SITE_API_CREDENTIAL``). It travels only in the
  ``Authorization`` header; it is never logged, never part of an exception and
  hidden from ``repr``.
- Transport failures and 5xx answers raise :class:`EdgeUnavailable`; 4xx answers
  raise :class:`EdgeRefused` with the edge's stable error code.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.edge import answers
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.log_reads import PermitRefused, PermitUnavailable
from site_runtime.application.ports import SiteCommand
from site_runtime.application.site_access import RepositoryGrant, release_each

log = logging.getLogger(__name__)

GRANT_PREFIX = "psb_"
MAX_GRANT_BYTES = 4096
NATIVE_END_RETRY_SECONDS = 300  # an edge without the native-end route is asked again after this


@dataclass(frozen=True)
class EdgeSettings:
    """Where the edge is and how to trust and authenticate to it.

    ``timeout_seconds`` bounds every request except the long-poll, which gets its
    ``wait`` on top.
    """

    base_url: str
    ca_file: Path | None = None
    credential_file: Path | None = None
    credential: str | None = field(default=None, repr=False)
    timeout_seconds: float = 15.0
    #: A member token is reused until this long before its expiry (seconds).
    member_token_renew_seconds: float = 120.0


class EdgeClient:
    """The Site edge over httpx (see module doc). Implements the worker's EdgePort and
    the executors' ExecutionAuthority, RepositoryGrants, MemberTokens and ReadPermits
    ports, and (:meth:`notice_native_end`) NativeEndNotice."""

    def __init__(self, settings: EdgeSettings, clock: Callable[[], float] = time.time) -> None:
        if not settings.base_url.startswith("https://"):
            raise ValueError("the Site edge URL must be https://")
        if settings.credential_file is None and not settings.credential:
            raise ValueError("a psb_ command grant is required (file or value)")
        self.settings = settings
        context = ssl.create_default_context(
            cafile=str(settings.ca_file) if settings.ca_file else None
        )
        self._client = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/"),
            verify=context,
            trust_env=False,
            follow_redirects=False,
            timeout=settings.timeout_seconds,
        )
        self.clock = clock
        # attempt id -> (expiry in epoch seconds, token); tokens live only in memory.
        self._member_tokens: dict[str, tuple[float, MemberCredential]] = {}
        self._edge_revokes_many = True  # False once an older edge lacked the batch route
        # Monotonic time before which the native-end route is not tried again: an older
        # edge (or a proxy during a rollout) answered it with a bare 404/405.
        self._native_end_retry_at = 0.0

    def __repr__(self) -> str:
        return f"EdgeClient({self.settings.base_url!r})"

    async def close(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    # ------------------------------------------------------------------ plumbing
    def _grant(self) -> str:
        if self.settings.credential_file is not None:
            try:
                raw = Path(self.settings.credential_file).read_bytes()[:MAX_GRANT_BYTES]
                grant = raw.decode("ascii").strip()
            except (OSError, UnicodeDecodeError):
                raise EdgeUnavailable("the Site credential file cannot be read") from None
        else:
            grant = (self.settings.credential or "").strip()
        if not grant.startswith(GRANT_PREFIX) or any(c.isspace() for c in grant):
            raise EdgeUnavailable("the Site credential is not a psb_ command grant")
        return grant

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        unavailable_code: str = "site-edge-unreachable",
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self._grant()}"}
        try:
            response = await self._client.request(
                method,
                path,
                json=json,
                params=params,
                headers=headers,
                timeout=timeout or self.settings.timeout_seconds,
            )
        except httpx.HTTPError as error:
            raise EdgeUnavailable(
                f"{method} {path}: {type(error).__name__}", unavailable_code
            ) from None
        if response.status_code >= 500:
            code = answers.error_code(response) or f"http-{response.status_code}"
            raise EdgeUnavailable(
                f"{method} {path}: HTTP {response.status_code} {code}",
                answers.unavailable(code, unavailable_code),
            )
        if response.status_code >= 400:
            body = answers.error(response)
            raise EdgeRefused(
                response.status_code,
                body.get("code") or "edge-refused",
                str(body.get("message") or "")[:300],
                body.get("reason"),
            )
        return response

    # ------------------------------------------------------------------ commands
    async def next_command(self, wait_seconds: float) -> SiteCommand | None:
        """``GET /v1/commands/next?wait=`` → the command, or None on 204."""
        wait = max(0.0, min(30.0, wait_seconds))
        response = await self._request(
            "GET",
            "/v1/commands/next",
            params={"wait": wait},
            timeout=self.settings.timeout_seconds + wait,
        )
        if response.status_code == 204:
            return None
        return answers.command(answers.json_object(response))

    async def record_result(self, sequence: int, result: dict[str, Any]) -> bool:
        """``POST /v1/commands/{sequence}/result`` → ``recorded`` (True/False)."""
        response = await self._request("POST", f"/v1/commands/{int(sequence)}/result", json=result)
        return bool(answers.json_object(response).get("recorded"))

    async def record_result_and_next(
        self, sequence: int, result: dict[str, Any], next_wait: float = 0.0
    ) -> tuple[bool, SiteCommand | None]:
        """``POST /v1/commands/{sequence}/result?next_wait=`` → ``(recorded, next)``: the
        stream's next command handed out with the answer; None when none arrived within
        ``next_wait`` seconds (0..30) or the edge answers without ``next``."""
        wait = max(0.0, min(30.0, next_wait))
        response = await self._request(
            "POST",
            f"/v1/commands/{int(sequence)}/result",
            json=result,
            params={"next_wait": wait},
            timeout=self.settings.timeout_seconds + wait,
        )
        body = answers.json_object(response)
        handed = body.get("next")
        try:
            command = answers.command(handed) if isinstance(handed, dict) else None
        except EdgeUnavailable:
            # The result is recorded either way; the GET that follows reports the shape.
            command = None
        return bool(body.get("recorded")), command

    async def report_progress(self, sequence: int, command_id: str, code: str) -> None:
        """``POST /v1/commands/{sequence}/progress`` with a catalogued deferral code."""
        await self._request(
            "POST",
            f"/v1/commands/{int(sequence)}/progress",
            json={"command_id": command_id, "code": code},
        )

    async def notice_native_end(self, attempt_id: str) -> bool:
        """``POST /v1/attempts/{attempt_id}/native-end`` (no body): the Runtime saw the
        Attempt's native work end, so the edge has Execution Core observe it at once
        (ADR 0016; a hint, never evidence: the observe reports the outcome).

        Answer 202 ``{"noticed": true | false}`` → the flag (False: noticed already).
        Raises EdgeRefused — 404 ``attempt-not-in-stream`` for an Attempt the stream
        does not know, 401 for the credential — and EdgeUnavailable (transport, 5xx).
        An older edge without the route (404/405 without an error code) gets False,
        and the route is not tried again for ``NATIVE_END_RETRY_SECONDS`` (300 s).
        """
        if time.monotonic() < self._native_end_retry_at:
            return False
        try:
            response = await self._request(
                "POST", f"/v1/attempts/{answers.segment(attempt_id)}/native-end"
            )
        except EdgeRefused as refused:
            if refused.status not in (404, 405) or refused.code != "edge-refused":
                raise
            log.warning(
                "the Site edge has no native-end route; ends wait for the observe "
                "(tried again in %d s)",
                NATIVE_END_RETRY_SECONDS,
            )
            self._native_end_retry_at = time.monotonic() + NATIVE_END_RETRY_SECONDS
            return False
        return bool(answers.json_object(response).get("noticed"))

    # ------------------------------------------------------------------ member identity
    async def member_token(self, attempt_id: str) -> MemberCredential:
        """``POST /v1/attempts/{attempt_id}/member-token`` → a fresh token for the
        Attempt's member (docs/slurm-lab.md), reused until
        ``member_token_renew_seconds`` before its ``expires_at``. Never logged or saved.
        Raises EdgeRefused and EdgeUnavailable (``identity-provider-unavailable``)."""
        cached = self._member_tokens.get(attempt_id)
        if cached and cached[0] - self.settings.member_token_renew_seconds > self.clock():
            return cached[1]
        response = await self._request(
            "POST",
            f"/v1/attempts/{answers.segment(attempt_id)}/member-token",
            unavailable_code="identity-provider-unavailable",
        )
        body = answers.json_object(response)
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise EdgeUnavailable("the edge returned no token", "identity-provider-unavailable")
        credential = MemberCredential(token)
        expires = answers.expiry(body.get("expires_at"), self.clock())
        self._member_tokens[attempt_id] = (expires, credential)
        return credential

    # ------------------------------------------------------------------ authority
    async def authorise_execution(self, request: dict[str, str]) -> dict[str, Any]:
        """``POST /v1/authorisations/execution`` → the saved material (prepare payload).

        Raises EdgeRefused ``authorisation-refused`` (with ``reason``) and
        EdgeUnavailable with code ``authority-unavailable``.
        """
        response = await self._request(
            "POST",
            "/v1/authorisations/execution",
            json=request,
            unavailable_code="authority-unavailable",
        )
        material = answers.json_object(response).get("material")
        if not isinstance(material, dict):
            raise EdgeUnavailable(
                "the authorisation answer has no material", "authority-unavailable"
            )
        return material

    async def authorise_with_grant(
        self, request: dict[str, str], direction: str
    ) -> tuple[dict[str, Any], RepositoryGrant]:
        """:meth:`authorise_execution` that also issues the Attempt's ``direction``
        repository grant in the same decision (one round trip; ``repository_grant`` in
        the request). Returns (material, grant). Raises EdgeRefused — code
        ``authorisation-refused`` for the decision, the grant's own code (e.g.
        ``repository-not-served``) otherwise; nothing is issued then — and EdgeUnavailable
        (``authority-unavailable``)."""
        response = await self._request(
            "POST",
            "/v1/authorisations/execution",
            json={**request, "repository_grant": direction},
            unavailable_code="authority-unavailable",
        )
        body = answers.json_object(response)
        material = body.get("material")
        grant = body.get("repository_grant")
        if not isinstance(material, dict) or not isinstance(grant, dict):
            raise EdgeUnavailable(
                "the authorisation answer has no material or grant", "authority-unavailable"
            )
        return material, answers.repository_grant(grant, "authority-unavailable")

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        """``POST /v1/attempts/{attempt_id}/repository-grants`` (stage-in | stage-out)."""
        response = await self._request(
            "POST",
            f"/v1/attempts/{answers.segment(attempt_id)}/repository-grants",
            json={"direction": direction},
            unavailable_code="repository-unavailable",
        )
        return answers.repository_grant(answers.json_object(response), "repository-unavailable")

    async def release(self, grant_id: str) -> None:
        """``DELETE /v1/repository-grants/{grant_id}``; an unknown grant counts as released."""
        try:
            await self._request(
                "DELETE",
                f"/v1/repository-grants/{answers.segment(grant_id)}",
                unavailable_code="repository-unavailable",
            )
        except EdgeRefused as refused:
            if refused.status != 404:
                raise

    async def release_many(self, grant_ids: list[str]) -> dict[str, str]:
        """``POST /v1/repository-grants/revocations`` for up to 100 grants at once →
        ``{grant_id: "revoked" | "not-found" | "forbidden"}`` (ids missing from the
        answer were not revoked: ask again later). An older edge without that route
        (404/405, remembered) gets one ``DELETE`` per grant instead. Raises
        EdgeUnavailable; EdgeRefused for a refused request."""
        if not self._edge_revokes_many:
            return await release_each(self.release, grant_ids)
        try:
            response = await self._request(
                "POST",
                "/v1/repository-grants/revocations",
                json={"grant_ids": grant_ids},
                unavailable_code="repository-unavailable",
            )
        except EdgeRefused as refused:
            if refused.status not in (404, 405):
                raise
            log.warning("the Site edge has no batch revocation route; one request per grant")
            self._edge_revokes_many = False
            return await release_each(self.release, grant_ids)
        results = answers.json_object(response).get("results")
        if not isinstance(results, dict):
            raise EdgeUnavailable("the revocation answer has no results", "repository-unavailable")
        return {str(k): str(v) for k, v in results.items() if k in grant_ids}

    # ------------------------------------------------------------------ read permits
    async def authorise_read(self, request: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/authorisations/read`` → the permit (docs/site-runtime.md, Codes).
        Raises PermitRefused (the edge's code and reason) or PermitUnavailable."""
        return await self._permit("/v1/authorisations/read", request)

    async def check_read_permit(self, permit_id: str) -> dict[str, Any]:
        """``POST /v1/read-permits/{permit_id}/check`` → the permit, confirmed now; a
        malformed permit id is refused ``read-permit-not-found`` without a request."""
        try:
            path = f"/v1/read-permits/{answers.segment(permit_id)}/check"
        except ValueError:
            raise PermitRefused("read-permit-not-found") from None
        return await self._permit(path, None)

    async def _permit(self, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        try:
            response = await self._request(
                "POST", path, json=body, unavailable_code="authority-unavailable"
            )
            return answers.json_object(response)
        except EdgeRefused as refused:
            raise PermitRefused(refused.code, refused.reason) from None
        except EdgeUnavailable:
            raise PermitUnavailable(path) from None
