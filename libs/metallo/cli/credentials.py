"""The member's tokens: obtained by ``metallo login``, kept 0600, refreshed before use.

Stored in ``METALLO_CREDENTIALS_FILE`` or ``<config dir>/metallo/credentials.json``
(``$XDG_CONFIG_HOME`` or ``~/.config``; the directory is made 0700, the file 0600,
replaced atomically)::

    {"issuer": "...", "token_endpoint": "...", "client_id": "metallo-cli", "ca_file": null,
     "username": "m-alice", "access_token": "...", "expires_at": 1767000000,
     "refresh_token": "...", "refresh_expires_at": 1767028800}

Tokens come from the issuer's token endpoint (OAuth 2.0 password grant; a refresh
with ``grant_type=refresh_token``). Neither the password nor a token is ever
printed, logged or put on a command line: the password is read from the
terminal or standard input.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from metallo.cli.exits import CliError, Exit

REFRESH_MARGIN_SECONDS = 60
DEFAULT_CLIENT = "metallo-cli"
MAX_RESPONSE_BYTES = 65_536
LOGIN_HINT = "run `metallo login` (in the dev stack: `metallo dev login`) and try again"


def credentials_path() -> Path:
    """Where the tokens live (it need not exist)."""
    explicit = os.environ.get("METALLO_CREDENTIALS_FILE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "metallo" / "credentials.json"


@dataclass
class Credentials:
    """One login's tokens and where to refresh them (times are POSIX seconds)."""

    issuer: str
    token_endpoint: str
    client_id: str
    username: str
    access_token: str
    expires_at: float
    refresh_token: str = ""
    refresh_expires_at: float = 0.0
    ca_file: str | None = None

    def __repr__(self) -> str:
        return f"Credentials(issuer={self.issuer!r}, username={self.username!r}, <tokens redacted>)"


def save(credentials: Credentials, path: Path | None = None) -> Path:
    """Write ``credentials`` (directory 0700, file 0600, atomic replace); return the path."""
    path = path or credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(asdict(credentials), fh)
    os.replace(tmp, path)
    return path


def load(path: Path | None = None) -> Credentials | None:
    """The stored credentials, or None when there are none or the file is unusable."""
    path = path or credentials_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Credentials(**{k: data[k] for k in Credentials.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return None


def forget(path: Path | None = None) -> bool:
    """Delete the stored credentials; True when there were some."""
    try:
        (path or credentials_path()).unlink()
    except FileNotFoundError:
        return False
    return True


def _http(ca_file: str | None):
    """An httpx client for the issuer (imported here: most commands never refresh)."""
    import httpx

    verify = ssl.create_default_context(cafile=ca_file) if ca_file else True
    return httpx.Client(timeout=15.0, follow_redirects=False, trust_env=False, verify=verify)


def _post(endpoint: str, form: dict[str, str], ca_file: str | None) -> dict:
    """POST ``form`` to the token endpoint; the parsed answer. Raises CliError."""
    import httpx

    if not endpoint.startswith("https://"):
        raise CliError(f"the token endpoint {endpoint} is not https", "configure an https issuer",
                       Exit.USAGE, code="login-failed")
    try:
        with _http(ca_file) as client:
            response = client.post(endpoint, data=form)
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the token endpoint {endpoint} ({type(exc).__name__})",
                       "check the issuer URL and METALLO_OIDC_CA_FILE, then log in again",
                       Exit.UNCERTAIN, code="issuer-unreachable") from None
    body = response.content[:MAX_RESPONSE_BYTES]
    try:
        answer = json.loads(body)
    except ValueError:
        answer = {}
    if response.status_code != 200 or not isinstance(answer, dict) \
            or not isinstance(answer.get("access_token"), str):
        error = answer.get("error", f"HTTP {response.status_code}") if isinstance(answer, dict) else ""
        raise CliError(f"the issuer refused the login ({error})",
                       "check the user name and password (or log in again: the refresh token "
                       "may have expired)", Exit.USAGE, code="login-failed")
    return answer


def discover(issuer: str, ca_file: str | None) -> str:
    """The issuer's token endpoint from ``<issuer>/.well-known/openid-configuration``."""
    import ssl

    import httpx

    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with _http(ca_file) as client:
            response = client.get(url)
        endpoint = response.json().get("token_endpoint") if response.status_code == 200 else None
    except httpx.ConnectError as exc:
        if isinstance(exc.__cause__, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY" in str(exc):
            raise CliError(f"the issuer {issuer}'s TLS certificate is not trusted",
                           "pass the CA that signed it: --ca-file (or METALLO_OIDC_CA_FILE); "
                           "for the dev stack, var/dev/certs/ca.pem",
                           Exit.USAGE, code="login-failed") from None
        raise CliError(f"the issuer {issuer} cannot be reached",
                       "check METALLO_OIDC_ISSUER (or --issuer) and that it is running",
                       Exit.USAGE, code="login-failed") from None
    except (httpx.HTTPError, ValueError, AttributeError):
        endpoint = None
    if not isinstance(endpoint, str) or not endpoint.startswith("https://"):
        raise CliError(f"the issuer {issuer} publishes no https token endpoint",
                       "check METALLO_OIDC_ISSUER (or --issuer) and METALLO_OIDC_CA_FILE",
                       Exit.USAGE, code="login-failed")
    return endpoint


def _from_answer(answer: dict, *, issuer: str, endpoint: str, client_id: str, username: str,
                 ca_file: str | None, now: float) -> Credentials:
    def seconds(name: str) -> float:
        value = answer.get(name)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0

    refresh = answer.get("refresh_token")
    return Credentials(issuer=issuer, token_endpoint=endpoint, client_id=client_id,
                       username=username, access_token=answer["access_token"],
                       expires_at=now + (seconds("expires_in") or 300.0),
                       refresh_token=refresh if isinstance(refresh, str) else "",
                       refresh_expires_at=now + seconds("refresh_expires_in") if refresh else 0.0,
                       ca_file=ca_file)


def password_login(issuer: str, username: str, password: str, *, client_id: str = DEFAULT_CLIENT,
                   ca_file: str | None = None, endpoint: str | None = None) -> Credentials:
    """Log in with the password grant; the new credentials (not yet saved). Raises CliError."""
    endpoint = endpoint or discover(issuer, ca_file)
    now = time.time()
    answer = _post(endpoint, {"grant_type": "password", "username": username,
                              "password": password, "client_id": client_id,
                              "scope": "openid"}, ca_file)
    return _from_answer(answer, issuer=issuer, endpoint=endpoint, client_id=client_id,
                        username=username, ca_file=ca_file, now=now)


def refreshed(credentials: Credentials) -> Credentials:
    """New tokens for ``credentials`` through its refresh token. Raises CliError."""
    now = time.time()
    answer = _post(credentials.token_endpoint, {"grant_type": "refresh_token",
                                                "refresh_token": credentials.refresh_token,
                                                "client_id": credentials.client_id},
                   credentials.ca_file)
    renewed = _from_answer(answer, issuer=credentials.issuer, endpoint=credentials.token_endpoint,
                           client_id=credentials.client_id, username=credentials.username,
                           ca_file=credentials.ca_file, now=now)
    if not renewed.refresh_token:  # an issuer may keep the refresh token it gave first
        renewed.refresh_token = credentials.refresh_token
        renewed.refresh_expires_at = credentials.refresh_expires_at
    return renewed


def current_token(path: Path | None = None) -> str:
    """A member access token valid for at least a minute: the stored one, or a refreshed one
    (saved). Raises CliError (exit 2, ``login-required``) saying to run ``metallo login``."""
    path = path or credentials_path()
    stored = load(path)
    if stored is None:
        raise CliError(f"not logged in (no member token in {path})", LOGIN_HINT, Exit.USAGE,
                       code="login-required")
    now = time.time()
    if stored.expires_at - REFRESH_MARGIN_SECONDS > now:
        return stored.access_token
    if not stored.refresh_token or stored.refresh_expires_at <= now:
        raise CliError(f"the login of {stored.username} has expired", LOGIN_HINT, Exit.USAGE,
                       code="login-required")
    try:
        renewed = refreshed(stored)
    except CliError as exc:
        raise CliError(f"the login of {stored.username} could not be refreshed: {exc.message}",
                       LOGIN_HINT, Exit.USAGE, code="login-required") from None
    save(renewed, path)
    return renewed.access_token
