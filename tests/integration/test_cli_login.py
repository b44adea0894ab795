"""``metallo login`` against the lab issuer's real login endpoints over TLS (uvicorn),
the 0600 token file, refresh, and the "run `metallo login`" refusal."""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import stat
import time
from pathlib import Path

import pytest
import uvicorn

from metallo.cli import credentials
from metallo.dev_certificates import make_dev_certificates
from metallo.identity.issuer import LabIssuer, generate_key
from metallo.identity.lab_login import LabAccount, hash_password, login_app, mount, write_accounts
from tests.bus import BUS
from tests.unit.cli_support import cli

pytestmark = pytest.mark.integration


@pytest.fixture
async def lab_issuer(tmp_path: Path, monkeypatch):
    """The login endpoints mounted at /lab-issuer on a TLS server; (issuer URL, CA, accounts)."""
    certs = make_dev_certificates(tmp_path / "certs")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"https://127.0.0.1:{sock.getsockname()[1]}/lab-issuer"
    issuer = LabIssuer(generate_key(tmp_path / "issuer"), issuer=url)
    accounts = tmp_path / "accounts.json"
    write_accounts(accounts, [LabAccount("m-alice", "lab-alice", hash_password("s3cret pw"))])

    async def elsewhere(scope, receive, send):  # what the edge would answer
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(mount("/lab-issuer", login_app(issuer, accounts), elsewhere),
                            ssl_certfile=str(tmp_path / "certs" / "server.pem"),
                            ssl_keyfile=str(tmp_path / "certs" / "server-key.pem"),
                            log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.05)
    monkeypatch.setenv("METALLO_CREDENTIALS_FILE", str(tmp_path / "cfg" / "credentials.json"))
    monkeypatch.setenv("METALLO_CONFIG", str(tmp_path / "absent.toml"))
    yield url, str(tmp_path / "certs" / "ca.pem"), accounts, issuer
    server.should_exit = True
    await task
    del certs


async def login(url: str, ca: str, password: str, monkeypatch) -> object:
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    return await cli("login", "--issuer", url, "--ca-file", ca, "--username", "m-alice",
                     "--password-stdin")


async def test_login_stores_a_verifiable_token_0600_and_refreshes_it(lab_issuer, monkeypatch):
    url, ca, _accounts, issuer = lab_issuer
    done = await login(url, ca, "s3cret pw", monkeypatch)
    assert done.code == 0, done.stderr
    path = credentials.credentials_path()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    stored = credentials.load()
    assert stored.username == "m-alice" and stored.issuer == url
    assert "s3cret" not in path.read_text() and stored.access_token not in done.stdout + done.stderr
    assert issuer.refreshed_subject(stored.refresh_token, "metallo-cli") == "lab-alice"
    # Near its expiry the token is refreshed through the refresh token, and saved.
    stored.expires_at = time.time() + 5
    credentials.save(stored)
    fresh = await asyncio.to_thread(credentials.current_token)
    assert fresh != stored.access_token and credentials.load().access_token == fresh


async def test_a_wrong_password_or_a_removed_account_logs_nobody_in(lab_issuer, monkeypatch):
    url, ca, accounts, _issuer = lab_issuer
    refused = await login(url, ca, "guess", monkeypatch)
    assert refused.code == 2 and "invalid_grant" in refused.stderr
    assert credentials.load() is None
    assert (await login(url, ca, "s3cret pw", monkeypatch)).code == 0
    write_accounts(accounts, [])  # the operator removes the account: no refresh either
    stored = credentials.load()
    stored.expires_at = time.time()
    credentials.save(stored)
    with pytest.raises(Exception) as expired:
        await asyncio.to_thread(credentials.current_token)
    assert "metallo login" in getattr(expired.value, "hint", "")


async def test_a_command_without_a_login_says_to_run_metallo_login(tmp_path, monkeypatch,
                                                                  namespace):
    monkeypatch.setenv("METALLO_CREDENTIALS_FILE", str(tmp_path / "none.json"))
    monkeypatch.setenv("METALLO_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("METALLO_PROJECT", "demo")
    monkeypatch.setenv("METALLO_AMQP_URL", BUS.url("cli"))  # the broker login is there
    monkeypatch.setenv("METALLO_TOPOLOGY_PREFIX", namespace)
    done = await cli("run", "show", "r-00000000000000000000000000", "--output", "json")
    assert done.code == 2
    assert "metallo login" in done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "login-required"


async def test_an_untrusted_issuer_certificate_is_named_as_such(lab_issuer):
    """Without the CA that signed the issuer's certificate, the login says so (and how
    to pass it), not that the issuer has no token endpoint."""
    import asyncio

    from metallo.cli.credentials import discover
    from metallo.cli.exits import CliError

    url, ca, _, _ = lab_issuer
    assert (await asyncio.to_thread(discover, url, ca)).startswith("https://")
    with pytest.raises(CliError) as refused:
        await asyncio.to_thread(discover, url, None)
    assert "TLS certificate is not trusted" in str(refused.value)
    assert "--ca-file" in refused.value.hint
