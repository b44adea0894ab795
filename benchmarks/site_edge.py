"""Site edge throughput: commands pulled and acknowledged per second over TLS.

Runs the real edge (uvicorn, TLS, PostgreSQL) in a child process and, in the same
run, measures with 1 and with 8 concurrent runtimes (one stream each, as one
Runtime worker serves one stream):

- ``commands_per_s``: commands pulled and acknowledged per second through the Site
  Runtime's own edge client and protocol: ``POST /v1/commands/{n}/result?next_wait=0``
  records a result and hands out the next command in its answer, so a busy stream
  costs one HTTPS request per command (``GET /v1/commands/next`` only when the answer
  has no next); each result recorded exactly once;
- ``round_trips_per_s``: the same number of bare HTTPS round trips to ``/healthz``
  with the same concurrency;
- ``ratio``: ``commands_per_s / round_trips_per_s`` (target ≥ 0.3);
- ``get_then_post_per_s`` / ``get_then_post_ratio``: the same with the older two-request
  cycle (``GET /v1/commands/next`` then ``POST …/result`` without ``next_wait``), which
  existing clients still use; at most 0.5 even with no server work.

Prints one JSON line. Usage: ``.venv/bin/python benchmarks/site_edge.py [--commands N]``.
Needs PostgreSQL (``METALLO_POSTGRES_URL``); uses a throw-away database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from metallo.common.v1 import common_pb2
from metallo.messaging import Topology
from metallo.persistence.engine import (
    create_engine,
    database_url,
    drop_database,
    session_factory,
)
from metallo.persistence.migrations import migrate
from metallo.site_coordination.v1 import site_coordination_pb2 as sc_pb2
from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.application.grants import create_command_grant
from site_coordination.application.streams import append_command
from site_runtime.adaptors.edge.client import EdgeClient, EdgeSettings

ROOT = Path(__file__).resolve().parents[1]
MIGRATIONS = ROOT / "services" / "site_coordination" / "migrations"


def serve(url: str, port: int, certs: Path, issuer_dir: Path) -> None:
    """Child process: the edge alone (no RabbitMQ needed to pull and record)."""
    from metallo.identity.issuer import LabIssuer
    from site_coordination.adaptors.edge.server import ServeOptions, build_server
    from site_coordination.adaptors.governance_authority import GovernanceAuthority
    from site_coordination.adaptors.wiring import build_edge, edge_engine

    async def main() -> None:
        engine = edge_engine(url)
        app = build_edge(engine, url, Topology(), issuer=LabIssuer.from_environment(issuer_dir),
                         authority=GovernanceAuthority(ROOT / "examples" / "governance.yaml"))
        server, sock = build_server(app, ServeOptions(port=port, cert_file=certs / "server.pem",
                                                      key_file=certs / "server-key.pem"))
        await server.serve(sockets=[sock])

    asyncio.run(main())


async def _append(engine, streams: list[str], per_stream: int) -> None:
    sessions = session_factory(engine)
    for site in streams:
        async with sessions.begin() as session:
            store = PostgresSiteStore(session)
            for _ in range(per_stream):
                await append_command(store, sc_pb2.AppendSiteCommand(
                    metadata=common_pb2.CommandMetadata(command_id=uuid.uuid4().hex),
                    site_id=site, environment="slurm", kind="observe", run_id="run-b",
                    attempt_id=f"att-{site}", attempt_number=1, payload_json="{}"))


def _result(command_id: str) -> dict:
    return {"command_id": command_id, "outcome": "succeeded", "observation": {"phase": "running"}}


async def _runtime(edge: EdgeClient, count: int) -> None:
    """The worker's protocol through its own client: take the next command from the
    result's answer; pull with GET only when the answer has none."""
    command = None
    for _ in range(count):
        if command is None:
            command = await edge.next_command(0)
        recorded, command = await edge.record_result_and_next(
            command.sequence, _result(command.command_id), next_wait=0)
        assert recorded


async def _get_then_post(client: httpx.AsyncClient, count: int) -> None:
    for _ in range(count):
        r = await client.get("/v1/commands/next")
        command = r.json()
        r = await client.post(f"/v1/commands/{command['sequence']}/result", json={
            "command_id": command["command_id"], "outcome": "succeeded",
            "observation": {"phase": "running"}})
        assert r.status_code == 200 and r.json()["recorded"], r.text


async def _round_trips(client: httpx.AsyncClient, count: int) -> None:
    for _ in range(count):
        r = await client.get("/healthz")
        assert r.status_code == 200


async def measure(base: str, ca_file: Path, secrets: list[str], total: int) -> dict:
    """Commands/s (Runtime protocol, then GET+POST) and bare round trips/s with
    ``len(secrets)`` concurrent runtimes; each stream holds ``2 * total / len`` commands."""
    per = total // len(secrets)
    context = ssl.create_default_context(cafile=str(ca_file))
    clients = [httpx.AsyncClient(base_url=base, verify=context, timeout=30,
                                 headers={"Authorization": f"Bearer {s}"}) for s in secrets]
    edges = [EdgeClient(EdgeSettings(base_url=base, ca_file=ca_file, credential=s,
                                     timeout_seconds=30)) for s in secrets]
    try:
        for c in clients:  # warm the TLS connections
            await c.get("/healthz")
        start = time.perf_counter()
        await asyncio.gather(*(_round_trips(c, per) for c in clients))
        trips = per * len(clients) / (time.perf_counter() - start)
        start = time.perf_counter()
        await asyncio.gather(*(_runtime(e, per) for e in edges))
        commands = per * len(clients) / (time.perf_counter() - start)
        start = time.perf_counter()
        await asyncio.gather(*(_get_then_post(c, per) for c in clients))
        legacy = per * len(clients) / (time.perf_counter() - start)
    finally:
        for c in clients:
            await c.aclose()
        for e in edges:
            await e.close()
    return {"runtimes": len(secrets), "commands": per * len(secrets),
            "commands_per_s": round(commands, 1), "round_trips_per_s": round(trips, 1),
            "ratio": round(commands / trips, 3),
            "get_then_post_per_s": round(legacy, 1),
            "get_then_post_ratio": round(legacy / trips, 3)}


async def main(total: int) -> None:
    from metallo.dev_certificates import make_dev_certificates

    url = database_url("site_coordination", f"bench_site_edge_{uuid.uuid4().hex[:8]}")
    await migrate(url, MIGRATIONS)
    engine = create_engine(url, pool_size=2)
    tmp = Path(tempfile.mkdtemp(prefix="site-edge-bench-"))
    proc = None
    try:
        make_dev_certificates(tmp / "certs")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k != "METALLO_LAB_ISSUER_KEY"}
        # Popen returns at once: the edge runs beside the benchmark in its own process.
        proc = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, __file__, "--serve", url, str(port), str(tmp)], env=env
        )
        single, eight = ["b-single"], [f"b-{i}" for i in range(8)]
        await _append(engine, single, 2 * total)
        await _append(engine, eight, 2 * (total // 8))

        @contextlib.asynccontextmanager
        async def tx():
            async with session_factory(engine).begin() as session:
                yield PostgresSiteStore(session)

        secrets = {site: (await create_command_grant(tx, site, "slurm", 3600)).secret
                   for site in single + eight}
        ca_file = tmp / "certs" / "ca.pem"
        base = f"https://127.0.0.1:{port}"
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca_file))) as probe:
            for _ in range(200):
                try:
                    await probe.get(base + "/healthz")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
        one = await measure(base, ca_file, [secrets[s] for s in single], total)
        many = await measure(base, ca_file, [secrets[s] for s in eight], total)
        print(json.dumps({"benchmark": "site_edge", "transport": "https",
                          "runtimes_1": one, "runtimes_8": many,
                          "ratio": min(one["ratio"], many["ratio"]), "target_ratio": 0.3}))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        await engine.dispose()
        await drop_database(url)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        tmp_dir = Path(sys.argv[4])
        serve(sys.argv[2], int(sys.argv[3]), tmp_dir / "certs", tmp_dir / "issuer")
    else:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--commands", type=int, default=400, help="commands per measurement")
        asyncio.run(main(parser.parse_args().commands))
