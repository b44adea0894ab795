"""Member access tokens on the command bus (docs/operators.md, Trust boundaries).

A member's command or query carries the access token the OIDC issuer gave the
member's client (``metallo login``; Keycloak in production). The owner checks it
here with the issuer's JSON Web Key Set before it believes anything the command
says about who asks:

* RS256 signature by a key the issuer publishes (``signed_claims``);
* ``iss`` is exactly the configured issuer, ``sub`` a nonempty string;
* the client: ``azp`` is one of the accepted clients, or — when the issuer sets
  no ``azp`` — ``aud`` names one of them;
* ``typ``, when present, is ``Bearer`` (Keycloak access tokens carry it; ID and
  refresh tokens carry ``ID`` / ``Refresh`` and are refused);
* ``exp`` in the future, ``nbf`` (when present) in the past, at most
  ``max_validity_seconds`` of validity.

What it proves is the pair (issuer, subject); the governance file binds a
subject to a member (``Governance.member_for_subject``). No message, exception
or ``repr`` here contains the token.
"""

from __future__ import annotations

import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metallo.identity.verify import (
    FileJwksSource,
    HttpJwksSource,
    JwksCache,
    JwksSource,
    MemberTokenRejected,
    signed_claims,
    validity_window,
)

MAX_ACCESS_VALIDITY_SECONDS = 3600


def jwks_source(url: str, *, ca_file: str | None = None) -> JwksSource:
    """``file:/path`` → :class:`FileJwksSource`; ``http(s)://…`` → :class:`HttpJwksSource`
    (TLS verified with ``ca_file`` when given). Raises ValueError for another scheme."""
    if url.startswith("file:"):
        return FileJwksSource(Path(url.removeprefix("file://").removeprefix("file:")))
    return HttpJwksSource(url, verify=ssl.create_default_context(cafile=ca_file) if ca_file else True)


@dataclass(frozen=True)
class VerifiedAccess:
    """What a verified access token proves: the issuer and subject, until ``expires_at``."""

    issuer: str
    subject: str
    client: str
    expires_at: float  # POSIX seconds


@dataclass
class AccessTokenVerifier:
    """Verifies member access tokens of one issuer for the accepted ``clients``.

    ``clients`` are the OIDC client ids whose tokens are accepted (``azp``, or
    ``aud`` when the issuer sets no ``azp``). ``leeway_seconds`` tolerates clock
    skew on ``exp``/``nbf``. Raises :class:`MemberTokenRejected` or
    :class:`~metallo.identity.verify.JwksUnavailable` from :meth:`verify`.
    """

    issuer: str
    clients: frozenset[str]
    keys: JwksCache
    clock: Callable[[], float] = time.time
    max_validity_seconds: int = MAX_ACCESS_VALIDITY_SECONDS
    leeway_seconds: float = 30.0
    _memo: OrderedDict[str, tuple[Any, dict[str, Any]]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    async def verify(self, token: str) -> VerifiedAccess:
        """Verify ``token`` (a compact JWS); return who it proves."""
        claims = await signed_claims(token, self.keys, self._memo)
        return self._check(claims)

    def _check(self, claims: Mapping[str, Any]) -> VerifiedAccess:
        if claims.get("iss") != self.issuer:
            raise MemberTokenRejected("issuer", "the token comes from another issuer")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject.strip() or len(subject) > 255:
            raise MemberTokenRejected("subject", "the token has no usable subject")
        if claims.get("typ", "Bearer") != "Bearer":
            raise MemberTokenRejected("type", "the token is not a Bearer access token")
        client = _client(claims, self.clients)
        exp = validity_window(claims, self.clock(), leeway_seconds=self.leeway_seconds,
                              max_validity_seconds=self.max_validity_seconds)
        return VerifiedAccess(issuer=self.issuer, subject=subject, client=client, expires_at=exp)


def _client(claims: Mapping[str, Any], clients: frozenset[str]) -> str:
    """The accepted client the token was issued to (``azp``, else ``aud``)."""
    azp = claims.get("azp")
    if azp is not None:
        if isinstance(azp, str) and azp in clients:
            return azp
        raise MemberTokenRejected("authorized-party", "the token was issued to another client")
    audience = claims.get("aud")
    names = [audience] if isinstance(audience, str) else audience
    if isinstance(names, list):
        for name in names:
            if isinstance(name, str) and name in clients:
                return name
    raise MemberTokenRejected("audience", "the token names no accepted client")
