"""``python -m site_coordination``: grant commands, dev-cert, and ``serve`` wiring
(migrations, command consumer, outbox relay, HTTPS edge) as a real process."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import sys
from pathlib import Path

import httpx
import pytest

from site_coordination.adaptors.edge.server import InsecureServing, ServeOptions, build_server

ROOT = Path(__file__).resolve().parents[2]


async def _run(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "site_coordination", *args, env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT)
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_grant_commands_print_the_secret_once(make_database):
    url = await make_database("site_coordination", ROOT / "services/site_coordination/migrations")
    env = {"METALLO_SITE_COORDINATION_DATABASE_URL": url}
    code, out, err = await _run("grant", "create", "--site", "lab-slurm", "--environment",
                                "slurm", "--expires", "30d", env=env)
    assert code == 0, err
    secret = out.strip()
    assert secret.startswith("psb_") and len(secret) == 47 and "grant cg-" in err
    code, listing, _ = await _run("grant", "list", env=env)
    assert code == 0 and "lab-slurm/slurm" in listing and secret not in listing
    grant_id = listing.split()[0]
    code, out, _ = await _run("grant", "revoke", grant_id, env=env)
    assert code == 0 and "revoked" in out
    code, _, err = await _run("grant", "create", "--site", "lab-slurm", "--environment", "vms",
                              env=env)
    assert code == 2 and "invalid-argument" in err


def test_plain_http_needs_the_flag_and_loopback():
    with pytest.raises(InsecureServing):
        build_server(object(), ServeOptions(port=0))
    with pytest.raises(InsecureServing):
        build_server(object(), ServeOptions(host="0.0.0.0", port=0, insecure_loopback=True))
    _server, sock = build_server(object(), ServeOptions(port=0, insecure_loopback=True))
    sock.close()


async def test_serve_wires_the_edge_over_tls(make_database, tmp_path, namespace, bus_url):
    url = await make_database("site_coordination")  # serve migrates it itself
    code, _, err = await _run("dev-cert", str(tmp_path / "certs"), env={})
    assert code == 0, err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ,
           "METALLO_SITE_COORDINATION_DATABASE_URL": url, "METALLO_AMQP_URL": bus_url("site_coordination"),
           "METALLO_TOPOLOGY_PREFIX": namespace, "METALLO_SITE_EDGE_PORT": str(port),
           "METALLO_SITE_EDGE_TLS_CERT": str(tmp_path / "certs/server.pem"),
           "METALLO_SITE_EDGE_TLS_KEY": str(tmp_path / "certs/server-key.pem"),
           "METALLO_LAB_ISSUER_DIR": str(tmp_path / "issuer"),
           "METALLO_LAB_GIT_ROOT": str(tmp_path / "repos")}
    env.pop("METALLO_LAB_ISSUER_KEY", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "site_coordination", "serve", env=env, cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "certs/ca.pem"))
        async with httpx.AsyncClient(verify=context, timeout=5) as client:
            for _ in range(150):
                try:
                    r = await client.get(f"https://127.0.0.1:{port}/healthz")
                    break
                except httpx.TransportError:
                    assert proc.returncode is None, (await proc.stderr.read()).decode()
                    await asyncio.sleep(0.2)
            assert r.json() == {"status": "ok"}
            r = await client.get(f"https://127.0.0.1:{port}/v1/commands/next")
            assert r.status_code == 401
            assert (await client.get(f"https://127.0.0.1:{port}/.well-known/jwks.json")).json()["keys"]
        assert (tmp_path / "issuer" / "private.pem").stat().st_mode & 0o777 == 0o600
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
