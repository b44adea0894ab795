"""Runtime command grants (``psb_``) and repository tokens (seed 004 §4B; DESIGN.md).

A command grant is a random bearer secret naming exactly one stream, with an
expiry and optional revocation. Only its SHA-256 is stored: the secret carries
256 random bits, so a plain hash cannot be searched back (no slow KDF needed).
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from site_coordination.domain.errors import Forbidden, Invalid, Unauthenticated
from site_coordination.domain.streams import StreamKey

GRANT_PREFIX = "psb_"
REPOSITORY_TOKEN_PREFIX = "prt_"
_SECRET = re.compile(r"^psb_[A-Za-z0-9_-]{43}$")
_REPO_TOKEN = re.compile(r"^prt_[A-Za-z0-9_-]{43}$")
_DURATION = re.compile(r"^([1-9][0-9]{0,6})([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_GRANT_SECONDS = 400 * 86400


def _random_secret(prefix: str) -> str:
    return prefix + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def new_grant_secret() -> str:
    """A fresh ``psb_`` secret: 32 random bytes, URL-safe base64 without padding (47 chars)."""
    return _random_secret(GRANT_PREFIX)


def new_repository_token() -> str:
    """A fresh ``prt_`` repository token (same shape as a grant secret)."""
    return _random_secret(REPOSITORY_TOKEN_PREFIX)


def secret_hash(secret: str) -> str:
    """Hex SHA-256 of a secret; the only form ever stored."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def is_repository_token(value: str) -> bool:
    """True when ``value`` has the ``prt_`` token shape."""
    return bool(_REPO_TOKEN.match(value))


def parse_bearer(header: str | None) -> str:
    """Extract the ``psb_`` secret from an ``Authorization`` header value.

    Raises :class:`Unauthenticated` ``credential-missing`` when absent and
    ``credential-malformed`` when it is not ``Bearer psb_<43 base64url chars>``.
    """
    if not header:
        raise Unauthenticated("credential-missing", "an Authorization: Bearer psb_… header is required")
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not _SECRET.match(value):
        raise Unauthenticated("credential-malformed", "the credential is not a psb_ command grant")
    return value


def parse_duration(text: str) -> int:
    """Parse ``30d``, ``12h``, ``90m`` or ``45s`` into seconds (1 s … 400 days).

    Raises :class:`Invalid` ``invalid-duration`` otherwise.
    """
    match = _DURATION.match(text.strip())
    if not match:
        raise Invalid("invalid-duration", "use a number followed by s, m, h or d (e.g. 30d)")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_GRANT_SECONDS:
        raise Invalid("invalid-duration", "a grant lasts at most 400 days")
    return seconds


@dataclass(frozen=True)
class CommandGrant:
    """A stored command grant (never the secret)."""

    grant_id: str
    stream: StreamKey
    label: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None


def check_grant(grant: CommandGrant | None, now: datetime) -> CommandGrant:
    """Return ``grant`` when usable at ``now`` (PostgreSQL's clock).

    Raises :class:`Unauthenticated` ``credential-unknown`` / ``credential-revoked``
    / ``credential-expired``.
    """
    if grant is None:
        raise Unauthenticated("credential-unknown", "no command grant has this secret")
    if grant.revoked_at is not None:
        raise Unauthenticated("credential-revoked", f"command grant {grant.grant_id} is revoked")
    if grant.expires_at <= now:
        raise Unauthenticated("credential-expired", f"command grant {grant.grant_id} has expired")
    return grant


def check_scope(grant: CommandGrant, stream: StreamKey) -> None:
    """Refuse (403) when ``stream`` is not the one stream ``grant`` names.

    ``grant-wrong-environment`` when only the environment differs, otherwise
    ``grant-wrong-scope``.
    """
    if grant.stream == stream:
        return
    if grant.stream.site_id == stream.site_id:
        raise Forbidden("grant-wrong-environment",
                        f"the grant names environment {grant.stream.environment}, "
                        f"not {stream.environment}")
    raise Forbidden("grant-wrong-scope", "the grant names another Site's stream")
