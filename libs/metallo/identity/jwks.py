"""The issuer's JSON Web Key Set for member-token verification
(:mod:`metallo.identity.verify`): where the document comes from (HTTPS or a file),
which keys of it are admitted (RSA signing keys with a ``kid``), and a cache that
keeps them at most five minutes (injected clock), refreshes once for an unknown
``kid`` and keeps the last good keys usable for ``stale_limit_seconds`` while the
issuer cannot be reached.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import jwt
from jwt.algorithms import RSAAlgorithm

from metallo.identity.errors import JwksUnavailable, MemberTokenRejected

MAX_JWKS_BYTES = 262_144
ALGORITHM = "RS256"


class JwksSource(Protocol):
    """Where a JWKS document comes from."""

    async def fetch(self) -> Mapping[str, Any]:
        """Return the parsed JWKS (``{"keys": [...]}``); raise :class:`JwksUnavailable`."""
        ...


@dataclass(frozen=True)
class HttpJwksSource:
    """A JWKS served over HTTP(S), fetched with httpx in bounded time.

    No proxy from the environment, no redirect, at most ``MAX_JWKS_BYTES`` bytes.
    ``verify`` is httpx's TLS setting (``True``, a CA file path or an SSL context).
    Plain ``http`` is accepted only for a loopback host (laboratory issuers).
    """

    url: str
    timeout_seconds: float = 5.0
    verify: Any = True

    def __post_init__(self) -> None:
        parsed = httpx.URL(self.url)
        if parsed.scheme == "http" and parsed.host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("a JWKS over plain http is accepted only from a loopback host")
        if parsed.scheme not in ("http", "https"):
            raise ValueError("the JWKS URL must be http(s)")

    async def fetch(self) -> Mapping[str, Any]:
        """GET the JWKS; :class:`JwksUnavailable` on any transport, status or format error."""
        try:
            async with (
                httpx.AsyncClient(
                    timeout=self.timeout_seconds,
                    follow_redirects=False,
                    trust_env=False,
                    verify=self.verify,
                ) as client,
                client.stream("GET", self.url) as response,
            ):
                if response.status_code != 200:
                    raise JwksUnavailable(f"the issuer answered HTTP {response.status_code}")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body.extend(chunk)
                    if len(body) > MAX_JWKS_BYTES:
                        raise JwksUnavailable("the JWKS document is too large")
        except httpx.HTTPError as error:
            raise JwksUnavailable(
                f"the issuer cannot be reached ({type(error).__name__})"
            ) from None
        return _parse_jwks(bytes(body))


@dataclass(frozen=True)
class FileJwksSource:
    """A JWKS kept in a local file (the Slurm lab's ``issuer/jwks.json``)."""

    path: Path

    async def fetch(self) -> Mapping[str, Any]:
        """Read and parse the file; :class:`JwksUnavailable` when unreadable or malformed."""
        try:
            data = Path(self.path).read_bytes()[: MAX_JWKS_BYTES + 1]
        except OSError as error:
            raise JwksUnavailable(f"cannot read the JWKS file ({error.strerror})") from None
        if len(data) > MAX_JWKS_BYTES:
            raise JwksUnavailable("the JWKS document is too large")
        return _parse_jwks(data)


def _parse_jwks(data: bytes) -> Mapping[str, Any]:
    try:
        document = json.loads(data)
    except ValueError:
        raise JwksUnavailable("the JWKS document is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksUnavailable("the JWKS document has no key list")
    return document


def _admitted_keys(document: Mapping[str, Any]) -> dict[str, Any]:
    """RSA signing keys by ``kid``; keys for other algorithms or uses are ignored."""
    keys: dict[str, Any] = {}
    for entry in document.get("keys", []):
        if not isinstance(entry, dict):
            continue
        kid = entry.get("kid")
        if not isinstance(kid, str) or not kid or entry.get("kty") != "RSA":
            continue
        if entry.get("use", "sig") != "sig" or entry.get("alg", ALGORITHM) != ALGORITHM:
            continue
        try:
            keys[kid] = RSAAlgorithm.from_jwk(entry)
        except (jwt.InvalidKeyError, ValueError, TypeError, KeyError):
            continue
    return keys


@dataclass
class JwksCache:
    """Admitted issuer keys, at most ``max_age_seconds`` old (seed 000: five minutes).

    ``clock`` returns seconds (POSIX time).  ``stale_limit_seconds`` bounds how
    long the last good keys stay usable while the issuer cannot be reached.
    ``min_refresh_interval_seconds`` bounds refreshes caused by unknown ``kid``
    values, so a stream of forged tokens cannot hammer the issuer.
    """

    source: JwksSource
    clock: Callable[[], float] = time.time
    max_age_seconds: float = 300.0
    stale_limit_seconds: float = 3600.0
    min_refresh_interval_seconds: float = 1.0
    _keys: dict[str, Any] = field(default_factory=dict, init=False)
    _fetched_at: float | None = field(default=None, init=False)
    _last_attempt: float | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    async def key(self, kid: str) -> Any:
        """The public key for ``kid``.

        Raises :class:`MemberTokenRejected` (``unknown-key``) when the issuer does
        not publish it after one refresh, :class:`JwksUnavailable` when no usable
        keys can be had.
        """
        async with self._lock:
            now = self.clock()
            fresh = self._fetched_at is not None and now - self._fetched_at <= self.max_age_seconds
            refreshed = False
            if not fresh:
                await self._refresh(now)
                refreshed = True
            if kid not in self._keys and not refreshed:
                recent = (
                    self._last_attempt is not None
                    and now - self._last_attempt < self.min_refresh_interval_seconds
                )
                if not recent:
                    await self._refresh(now)
            if kid not in self._keys:
                raise MemberTokenRejected(
                    "unknown-key", "the issuer does not publish the token's key"
                )
            return self._keys[kid]

    async def _refresh(self, now: float) -> None:
        self._last_attempt = now
        try:
            document = await self.source.fetch()
        except JwksUnavailable:
            # Keep the last good keys for a bounded time while the issuer is away.
            if self._fetched_at is not None and now - self._fetched_at <= self.stale_limit_seconds:
                return
            self._keys = {}
            raise
        self._keys = _admitted_keys(document)
        self._fetched_at = now
