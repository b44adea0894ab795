"""The lab issuer's login endpoints (the Keycloak development adapter; docs/operators.md).

Served under the lab issuer's URL (``METALLO_LAB_ISSUER_URL``, the dev stack
mounts it on the Site edge at ``/lab-issuer``):

* ``GET /.well-known/openid-configuration`` — ``issuer``, ``token_endpoint``, ``jwks_uri``;
* ``GET /.well-known/jwks.json`` — the issuer's public keys;
* ``POST /token`` (``application/x-www-form-urlencoded``, RFC 6749): ``grant_type=password``
  with ``username``, ``password``, ``client_id``; or ``grant_type=refresh_token`` with
  ``refresh_token``, ``client_id``. The answer is ``access_token``, ``token_type``,
  ``expires_in``, ``refresh_token``, ``refresh_expires_in``; a refusal is HTTP 400/401
  with ``{"error": "invalid_grant" | "invalid_client" | "invalid_request" |
  "unsupported_grant_type"}``.

Lab accounts live in a JSON file an operator (or ``metallo dev up``) writes::

    {"accounts": {"m-alice": {"subject": "lab-alice", "password": "scrypt$<salt>$<hash>"}}}

re-read on every request, so an account removed from the file can neither log in
nor refresh. Passwords are stored only as scrypt hashes; no password, token or
form body is ever logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from metallo.identity.issuer import LabIssuer

LOGIN_CLIENT = "metallo-cli"
MAX_FORM_BYTES = 16_384
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}


def hash_password(password: str) -> str:
    """``scrypt$<salt b64>$<hash b64>`` for ``password`` (random 16-byte salt)."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, **_SCRYPT)
    return f"scrypt${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def password_matches(password: str, stored: str) -> bool:
    """Whether ``password`` hashes to ``stored`` (constant-time compare; False when malformed)."""
    try:
        scheme, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), **_SCRYPT)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


@dataclass(frozen=True)
class LabAccount:
    """One lab login: its name, the ``sub`` its tokens carry, its password hash."""

    username: str
    subject: str
    password_hash: str


def write_accounts(path: Path, accounts: list[LabAccount]) -> None:
    """Write the accounts file (mode 0600, replaced atomically)."""
    data = {"accounts": {a.username: {"subject": a.subject, "password": a.password_hash}
                         for a in accounts}}
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)


def read_accounts(path: Path) -> dict[str, LabAccount]:
    """The accounts by username; {} when the file is missing or malformed (nobody logs in)."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = raw["accounts"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    out: dict[str, LabAccount] = {}
    if not isinstance(entries, dict):
        return out
    for name, entry in entries.items():
        if isinstance(entry, dict) and isinstance(entry.get("subject"), str) \
                and isinstance(entry.get("password"), str):
            out[name] = LabAccount(name, entry["subject"], entry["password"])
    return out


def _refusal(error: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": error}, status_code=status,
                        headers={"Cache-Control": "no-store"})


def login_app(issuer: LabIssuer, accounts_file: Path, *,
              clients: frozenset[str] = frozenset({LOGIN_CLIENT})) -> Starlette:
    """The ASGI app of the login endpoints (see module doc), for ``issuer``'s key."""

    async def configuration(_request: Request) -> JSONResponse:
        return JSONResponse({
            "issuer": issuer.issuer,
            "token_endpoint": f"{issuer.issuer}/token",
            "jwks_uri": f"{issuer.issuer}/.well-known/jwks.json",
            "grant_types_supported": ["password", "refresh_token"],
            "id_token_signing_alg_values_supported": ["RS256"],
        })

    async def jwks(_request: Request) -> JSONResponse:
        return JSONResponse(issuer.jwks())

    async def token(request: Request) -> JSONResponse:
        if request.headers.get("content-type", "").split(";")[0].strip() \
                != "application/x-www-form-urlencoded":
            return _refusal("invalid_request")
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > MAX_FORM_BYTES:
                return _refusal("invalid_request")
        try:
            form = {k: v[0] for k, v in parse_qs(body.decode("utf-8"), strict_parsing=False).items()}
        except UnicodeDecodeError:
            return _refusal("invalid_request")
        client = form.get("client_id", "")
        if client not in clients:
            return _refusal("invalid_client", 401)
        known = read_accounts(accounts_file)
        grant = form.get("grant_type")
        if grant == "password":
            account = known.get(form.get("username", ""))
            if account is None or not password_matches(form.get("password", ""),
                                                       account.password_hash):
                return _refusal("invalid_grant")
            subject = account.subject
        elif grant == "refresh_token":
            try:
                subject = issuer.refreshed_subject(form.get("refresh_token", ""), client)
            except ValueError:
                return _refusal("invalid_grant")
            if subject not in {a.subject for a in known.values()}:
                return _refusal("invalid_grant")
        else:
            return _refusal("unsupported_grant_type")
        access, expires_in = issuer.issue_access(subject, client)
        refresh, refresh_expires_in = issuer.issue_refresh(subject, client)
        return JSONResponse({"access_token": access, "token_type": "Bearer",
                             "expires_in": expires_in, "refresh_token": refresh,
                             "refresh_expires_in": refresh_expires_in},
                            headers={"Cache-Control": "no-store"})

    return Starlette(routes=[
        Route("/.well-known/openid-configuration", configuration, methods=["GET"]),
        Route("/.well-known/jwks.json", jwks, methods=["GET"]),
        Route("/token", token, methods=["POST"]),
    ])


def mount(prefix: str, inner, outer):
    """One ASGI app: HTTP paths under ``prefix`` (e.g. ``/lab-issuer``) go to ``inner``
    with the prefix removed, everything else (and lifespan) to ``outer``."""
    prefix = prefix.rstrip("/")

    async def app(scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith(prefix + "/"):
            inner_path = path[len(prefix):]
            await inner({**scope, "path": inner_path, "raw_path": inner_path.encode()}, receive, send)
        else:
            await outer(scope, receive, send)

    return app
