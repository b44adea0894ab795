"""The lab member-token issuer (the Keycloak development adapter; DESIGN.md, Slurm lab).

Signs per-action member tokens with RS256. Slurm 22.05 takes the user from the
``sun`` or ``username`` claim, the Site Runtime checks ``site_username``, so a
token carries all three with the same value, plus ``iss``, ``sub`` (member id),
``azp``, ``typ: Bearer``, a ``scope`` naming ``site_username``, ``iat``, ``nbf``,
``exp`` (at most 3600 s after ``iat``) and ``jti``; the header names the ``kid``.

Key: PEM file at ``METALLO_LAB_ISSUER_KEY`` (the Slurm lab writes
``/var/lib/metallo-slurm-lab/issuer/private.pem`` with ``jwks.json`` beside it).
When that is unset or missing, :meth:`LabIssuer.from_environment` generates a
2048-bit key in the directory it is given (mode 0600) and writes ``jwks.json``.
When a ``jwks.json`` lies beside the key and lists the same modulus, its ``kid``
is used, so tokens match what Slurm was told to trust.

For ``metallo login`` (``metallo.identity.lab_login``) it also signs bus access
tokens (``typ: Bearer``, ``azp`` the login client, 15 minutes) and refresh tokens
(``typ: Refresh``, audience the issuer itself, 8 hours) that only it accepts back.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

MAX_LIFETIME_SECONDS = 3600
DEFAULT_ISSUER = "https://127.0.0.1:8443/lab-issuer"
DEFAULT_AZP = "metallo-site-runtime"
ACCESS_LIFETIME_SECONDS = 900        # bus access tokens of `metallo login`
REFRESH_LIFETIME_SECONDS = 8 * 3600  # their refresh tokens


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def public_jwk(public_key: rsa.RSAPublicKey, kid: str | None = None) -> dict[str, str]:
    """The RSA public key as a JWK (``kty``, ``n``, ``e``, ``alg``, ``use``, ``kid``).

    ``kid`` defaults to the RFC 7638 thumbprint.
    """
    numbers = public_key.public_numbers()
    n, e = _b64(numbers.n), _b64(numbers.e)
    if kid is None:
        thumb = json.dumps({"e": e, "kty": "RSA", "n": n}, separators=(",", ":"))
        kid = base64.urlsafe_b64encode(hashlib.sha256(thumb.encode()).digest()).decode().rstrip("=")
    return {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": n, "e": e}


def generate_key(directory: Path) -> Path:
    """Write a new 2048-bit RSA key (``private.pem``, mode 0600) and ``jwks.json``; return the key path."""
    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = directory / "private.pem"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    (directory / "jwks.json").write_text(json.dumps({"keys": [public_jwk(key.public_key())]}))
    return path


class LabIssuer:
    """Signs member tokens with one RS256 key; serves its JWKS."""

    def __init__(self, key_path: Path, *, issuer: str = DEFAULT_ISSUER, azp: str = DEFAULT_AZP) -> None:
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError(f"{key_path} is not an RSA private key")
        self._key = key
        self.issuer = issuer
        self.azp = azp
        self._jwk = public_jwk(key.public_key(), self._kid_beside(Path(key_path)))

    def _kid_beside(self, key_path: Path) -> str | None:
        jwks_path = key_path.parent / "jwks.json"
        try:
            keys = json.loads(jwks_path.read_text())["keys"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        n = _b64(self._key.public_key().public_numbers().n)
        for entry in keys:
            if isinstance(entry, dict) and entry.get("n") == n and isinstance(entry.get("kid"), str):
                return entry["kid"]
        return None

    @classmethod
    def from_environment(cls, fallback_dir: Path, *, issuer: str | None = None,
                         azp: str | None = None) -> LabIssuer:
        """Use ``METALLO_LAB_ISSUER_KEY`` when it names an existing file, otherwise the key
        in ``fallback_dir`` (generated there when absent). ``issuer``/``azp`` default to
        ``METALLO_LAB_ISSUER_URL`` / ``METALLO_LAB_ISSUER_AZP`` or the built-in defaults.
        """
        configured = os.environ.get("METALLO_LAB_ISSUER_KEY")
        if configured and Path(configured).is_file():
            path = Path(configured)
        else:
            path = Path(fallback_dir) / "private.pem"
            if not path.is_file():
                path = generate_key(Path(fallback_dir))
        return cls(path,
                   issuer=issuer or os.environ.get("METALLO_LAB_ISSUER_URL", DEFAULT_ISSUER),
                   azp=azp or os.environ.get("METALLO_LAB_ISSUER_AZP", DEFAULT_AZP))

    @property
    def kid(self) -> str:
        """The signing key's JWK ``kid`` (from ``jwks.json`` beside the key, else a thumbprint)."""
        return self._jwk["kid"]

    def jwks(self) -> dict[str, Any]:
        """``{"keys": [<public JWK>]}`` for ``/.well-known/jwks.json``."""
        return {"keys": [dict(self._jwk)]}

    def issue(self, member_id: str, site_username: str,
              lifetime_seconds: int = MAX_LIFETIME_SECONDS) -> tuple[str, datetime]:
        """Sign a token for ``member_id`` acting as ``site_username``; return ``(jwt, expires_at)``.

        ``lifetime_seconds`` is clamped to 1..3600. Raises ValueError for empty names.
        """
        if not member_id or not site_username:
            raise ValueError("member_id and site_username are required")
        lifetime = max(1, min(int(lifetime_seconds), MAX_LIFETIME_SECONDS))
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": member_id,
            "azp": self.azp,
            "typ": "Bearer",
            "scope": "openid site_username",
            "site_username": site_username,
            "username": site_username,
            "sun": site_username,
            "iat": now,
            "nbf": now,
            "exp": now + lifetime,
            "jti": secrets.token_hex(16),
        }
        token = jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.kid})
        return token, datetime.fromtimestamp(now + lifetime, tz=UTC)

    def issue_access(self, subject: str, client_id: str,
                     lifetime_seconds: int = ACCESS_LIFETIME_SECONDS) -> tuple[str, int]:
        """Sign a bus access token (``typ: Bearer``, no Site claims) for the lab login of
        ``subject`` through client ``client_id``; return ``(jwt, lifetime seconds)``."""
        return self._sign(subject, client_id, "Bearer", lifetime_seconds, scope="openid")

    def issue_refresh(self, subject: str, client_id: str,
                      lifetime_seconds: int = REFRESH_LIFETIME_SECONDS) -> tuple[str, int]:
        """Sign a refresh token (``typ: Refresh``, audience the issuer itself); return
        ``(jwt, lifetime seconds)``. Only :meth:`refreshed_subject` accepts it."""
        return self._sign(subject, client_id, "Refresh", lifetime_seconds, audience=self.issuer)

    def refreshed_subject(self, token: str, client_id: str) -> str:
        """The subject of a refresh token this issuer signed for ``client_id``.

        Raises ValueError when the token is not one (another signer, type, client or
        issuer, expired, malformed); the message never quotes the token.
        """
        try:
            claims = jwt.decode(token, self._key.public_key(), algorithms=["RS256"],
                                audience=self.issuer, issuer=self.issuer,
                                options={"require": ["exp", "sub", "iss", "aud"]})
        except jwt.PyJWTError as exc:
            raise ValueError(f"the refresh token is not valid ({type(exc).__name__})") from None
        if claims.get("typ") != "Refresh" or claims.get("azp") != client_id:
            raise ValueError("the token is not a refresh token of this client")
        return str(claims["sub"])

    def _sign(self, subject: str, client_id: str, typ: str, lifetime_seconds: int,
              **extra: str) -> tuple[str, int]:
        if not subject or not client_id:
            raise ValueError("subject and client_id are required")
        lifetime = max(1, int(lifetime_seconds))
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": subject, "azp": client_id, "typ": typ,
                  "iat": now, "nbf": now, "exp": now + lifetime, "jti": secrets.token_hex(16)}
        if "audience" in extra:
            claims["aud"] = extra.pop("audience")
        claims.update(extra)
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.kid}), lifetime
