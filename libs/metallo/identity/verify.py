"""Member JWT verification before a native Slurm request (seed 000, Identity and credentials).

Every native Slurm request made for a member carries that member's own access
token.  Before it leaves the Runtime the token is checked here, with the
issuer's JSON Web Key Set:

* the compact JWS header names ``alg: RS256`` (nothing else, never ``none``) and
  a ``kid`` the issuer publishes; the signature verifies with that key;
* ``iss`` is exactly the configured issuer, ``azp`` the configured login client,
  ``typ`` is ``Bearer``, ``scope`` contains ``site_username``, ``sub`` is a
  nonempty string;
* ``site_username`` equals the saved binding subject, and the native username
  claims Slurm reads (``sun``, ``username``) agree with it when present;
* ``aud``, when present, names only the login client;
* ``exp`` is in the future, ``nbf`` (when present) in the past, and the token is
  valid for at most 3600 seconds (from ``nbf`` or ``iat``; without either, the
  remaining validity counts).

Keys (:mod:`metallo.identity.jwks`) are cached for at most five minutes (injected clock); an unknown ``kid``
causes one refresh; an expired cache is refreshed before reuse; when the issuer
cannot be reached the last good keys stay usable for a bounded time
(``stale_limit_seconds``) so a short outage does not stop observation.

No message, exception or ``repr`` here contains the token.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt

from metallo.identity.errors import JwksUnavailable, MemberTokenRejected
from metallo.identity.jwks import (
    ALGORITHM,
    MAX_JWKS_BYTES,
    FileJwksSource,
    HttpJwksSource,
    JwksCache,
    JwksSource,
)

# Names callers import from here (the keys and the errors live in jwks and errors).
__all__ = [
    "ALGORITHM", "MAX_JWKS_BYTES", "FileJwksSource", "HttpJwksSource", "JwksCache",
    "JwksSource", "JwksUnavailable", "MemberCredential", "MemberTokenRejected",
    "MemberTokenVerifier", "VerifiedMemberToken", "signed_claims", "validity_window",
]

MAX_TOKEN_CHARS = 16_384
MEMO_ENTRIES = 512
_B64URL = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class VerifiedMemberToken:
    """The facts a verified member token proves (no bearer value)."""

    subject: str
    site_username: str
    issuer: str
    expires_at: float  # POSIX seconds


class MemberCredential:
    """A member bearer token; ``repr``/``str`` never show it (seed 000)."""

    __slots__ = ("_token",)

    def __init__(self, token: str) -> None:
        self._token = token

    def bearer(self) -> str:
        """The raw token, for the ``X-SLURM-USER-TOKEN`` header only."""
        return self._token

    def __repr__(self) -> str:
        return "MemberCredential(<redacted>)"

    __str__ = __repr__


@dataclass
class MemberTokenVerifier:
    """Checks a member JWT for one native Slurm request (seed 000).

    ``issuer`` and ``authorized_party`` are exact strings; ``max_validity_seconds``
    is at most 3600; ``leeway_seconds`` tolerates clock skew on ``exp``/``nbf``.
    """

    issuer: str
    authorized_party: str
    keys: JwksCache
    clock: Callable[[], float] = time.time
    max_validity_seconds: int = 3600
    leeway_seconds: float = 0.0
    # Signature checks already passed, by exact token and the key object that
    # verified it (a JWKS refresh makes new key objects, so its entries lapse).
    # Claims, validity and the site username are still checked on every call.
    _memo: OrderedDict[str, tuple[Any, dict[str, Any]]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    async def verify(
        self, token: str | MemberCredential, *, site_username: str
    ) -> VerifiedMemberToken:
        """Verify ``token`` for the binding subject ``site_username``.

        Returns :class:`VerifiedMemberToken`; raises :class:`MemberTokenRejected`
        or :class:`JwksUnavailable`.
        """
        raw = token.bearer() if isinstance(token, MemberCredential) else token
        claims = await signed_claims(raw, self.keys, self._memo)
        return self._check_claims(claims, site_username)

    def _check_claims(self, claims: Mapping[str, Any], site_username: str) -> VerifiedMemberToken:
        if claims.get("iss") != self.issuer:
            raise MemberTokenRejected("issuer", "the token comes from another issuer")
        if claims.get("azp") != self.authorized_party:
            raise MemberTokenRejected("authorized-party", "the token was issued to another client")
        if claims.get("typ") != "Bearer":
            raise MemberTokenRejected("type", "the token is not a Bearer access token")
        scope = claims.get("scope")
        if not isinstance(scope, str) or "site_username" not in scope.split():
            raise MemberTokenRejected("scope", "the token lacks the site_username scope")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject.strip():
            raise MemberTokenRejected("subject", "the token has no subject")
        claimed = claims.get("site_username")
        if not isinstance(claimed, str) or not claimed or claimed != site_username:
            raise MemberTokenRejected("site-username", "the token is for another site username")
        for name in ("sun", "username"):
            if name in claims and claims[name] != site_username:
                raise MemberTokenRejected(
                    "username-conflict", f"the token's {name} claim disagrees"
                )
        if "aud" in claims:
            audience = claims["aud"]
            names = [audience] if isinstance(audience, str) else audience
            if not isinstance(names, list) or names != [self.authorized_party]:
                raise MemberTokenRejected("audience", "the token names another audience")
        exp = validity_window(claims, self.clock(), leeway_seconds=self.leeway_seconds,
                              max_validity_seconds=self.max_validity_seconds)
        return VerifiedMemberToken(
            subject=subject, site_username=claimed, issuer=self.issuer, expires_at=exp
        )


async def signed_claims(
    raw: object, keys: JwksCache, memo: OrderedDict[str, tuple[Any, dict[str, Any]]]
) -> dict[str, Any]:
    """The claims of compact JWS ``raw`` once its RS256 signature verifies with the
    issuer key its ``kid`` names. Checks no claim. ``memo`` remembers verified
    signatures by exact token and key object (a JWKS refresh makes new key objects,
    so its entries lapse), bounded to ``MEMO_ENTRIES``.

    Raises :class:`MemberTokenRejected` (``malformed``, ``algorithm``,
    ``unknown-key``, ``signature``) or :class:`JwksUnavailable`.
    """
    if not isinstance(raw, str) or not raw or len(raw) > MAX_TOKEN_CHARS or raw.count(".") != 2:
        raise MemberTokenRejected("malformed", "the token is not a compact JWS")
    header = _header(raw)
    if header.get("alg") != ALGORITHM:
        raise MemberTokenRejected("algorithm", "only RS256 tokens are accepted")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise MemberTokenRejected("unknown-key", "the token names no key")
    key = await keys.key(kid)
    remembered = memo.get(raw)
    if remembered is not None and remembered[0] is key:
        memo.move_to_end(raw)
        return remembered[1]
    try:
        claims = jwt.decode(
            raw,
            key=key,
            algorithms=[ALGORITHM],
            options={
                "verify_signature": True,
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
            },
        )
    except jwt.InvalidSignatureError:
        raise MemberTokenRejected("signature", "the token signature does not verify") from None
    except jwt.PyJWTError:
        raise MemberTokenRejected("malformed", "the token cannot be decoded") from None
    memo[raw] = (key, claims)
    while len(memo) > MEMO_ENTRIES:
        memo.popitem(last=False)
    return claims


def validity_window(
    claims: Mapping[str, Any], now: float, *, leeway_seconds: float, max_validity_seconds: float
) -> float:
    """Check ``exp``/``nbf``/``iat`` at ``now`` (POSIX seconds); return ``exp``.

    Raises :class:`MemberTokenRejected` (``malformed``, ``expired``,
    ``not-yet-valid``, ``validity-too-long``).
    """
    exp = _number(claims, "exp", required=True)
    nbf = _number(claims, "nbf")
    iat = _number(claims, "iat")
    assert exp is not None
    if now >= exp + leeway_seconds:
        raise MemberTokenRejected("expired", "the token has expired")
    if nbf is not None and now + leeway_seconds < nbf:
        raise MemberTokenRejected("not-yet-valid", "the token is not valid yet")
    start = nbf if nbf is not None else iat if iat is not None else now
    if exp - start > max_validity_seconds:
        raise MemberTokenRejected("validity-too-long", "the token is valid for too long")
    return exp


def _header(raw: str) -> dict[str, Any]:
    """The JOSE header of a compact JWS, decoded without touching the rest."""
    segment = raw.split(".", 1)[0]
    if not _B64URL.match(segment) or len(segment) % 4 == 1:
        raise MemberTokenRejected("malformed", "the token header cannot be read")
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError):
        raise MemberTokenRejected("malformed", "the token header cannot be read") from None
    if not isinstance(header, dict):
        raise MemberTokenRejected("malformed", "the token header is not an object")
    return header


def _number(claims: Mapping[str, Any], name: str, *, required: bool = False) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise MemberTokenRejected("malformed", f"the token has no {name} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MemberTokenRejected("malformed", f"the token's {name} claim is not a number")
    return float(value)
