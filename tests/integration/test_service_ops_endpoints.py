"""``python -m execution_core`` and ``python -m pipeline_coordination`` as processes:
each serves /healthz, /readyz (ready once migrated and consuming) and /metrics with
its database figures on METALLO_OPS_ADDRESS, and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
READY = {"database": "ok", "migrations": "ok", "broker": "ok", "consumers": "ok"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(("service", "figures"), [
    ("execution_core", ["# TYPE metallo_runs gauge",
                        "metallo_run_launch_to_native_start_seconds_count 0.0"]),
    ("pipeline_coordination", []),
])
async def test_service_process_serves_its_operations_endpoint(service, figures, make_database,
                                                              bus_url, topology):
    url = await make_database(service)  # the process migrates it itself
    port = free_port()
    env = {**os.environ, f"METALLO_{service.upper()}_DATABASE_URL": url,
           "METALLO_AMQP_URL": bus_url(service), "METALLO_TOPOLOGY_PREFIX": topology.prefix,
           "METALLO_GOVERNANCE_FILE": str(ROOT / "examples" / "governance.yaml"),
           "METALLO_OPS_ADDRESS": f"127.0.0.1:{port}"}
    for q in (topology.command_queue(service), topology.query_queue(service),
              topology.event_queue(service)):
        topology.declared_queues.update({q, f"{q}.retry", f"{q}.dlq"})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", service, env=env, cwd=str(ROOT),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            ready = None
            for _ in range(120):
                assert proc.returncode is None, (await proc.stderr.read()).decode()[-3000:]
                try:
                    ready = await http.get("/readyz")
                    if ready.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.5)
            assert ready is not None and ready.status_code == 200, ready and ready.text
            assert ready.json() == {"ready": True, "service": service, "checks": READY}
            assert (await http.get("/healthz")).json()["status"] == "alive"
            metrics = (await http.get("/metrics")).text
            assert f'metallo_outbox_backlog{{service="{service}"}} 0.0' in metrics
            for figure in figures:
                assert figure in metrics, figure
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 60)
    assert code == 0, (await proc.stderr.read()).decode()[-3000:]
