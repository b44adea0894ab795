"""`metallo dev status` reads each component's /readyz (real HTTP on loopback) and
shows it: ready, not ready with the failing checks, or no answer."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest

from metallo.operations.readiness import Readiness
from metallo.operations.server import OpsServer
from tests.unit.cli_support import run_cli
from tests.unit.devstack_support import with_broker_users


async def _behind() -> str | None:
    return "database at ['0001'], code at ['0002']"


@pytest.fixture
def endpoints():
    """Two operations endpoints served from a background loop: one ready, one not."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers = [OpsServer("ready", Readiness(), address=("127.0.0.1", 0)),
               OpsServer("behind", Readiness({"migrations": _behind}), address=("127.0.0.1", 0))]
    for s in servers:
        asyncio.run_coroutine_threadsafe(s.start(), loop).result(10)
    yield [f"http://127.0.0.1:{s.port}" for s in servers]
    for s in servers:
        asyncio.run_coroutine_threadsafe(s.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_status_shows_each_components_readiness(monkeypatch, endpoints):
    from metallo.devstack import control

    ready, behind = endpoints
    gone = f"http://127.0.0.1:{closed_port()}"
    live = {"pid": 4242, "status": "ready", "executor": "local",
            "edge_url": "https://127.0.0.1:8443", "components": {
                "execution_core": {"pid": 11, "state": "ready", "restarts": 0, "log": "ec.log",
                                   "ops_url": ready},
                "pipeline_coordination": {"pid": 12, "state": "ready", "restarts": 0,
                                          "log": "pc.log", "ops_url": behind},
                "site_runtime": {"pid": 13, "state": "ready", "restarts": 0, "log": "rt.log",
                                 "ops_url": gone}}}
    monkeypatch.setattr(control, "running_supervisor", lambda layout: live)
    shown = run_cli("dev", "status")
    # A running component that is not ready degrades the stack: named, with its reason.
    assert shown.code == 1, shown.stderr
    assert shown.stdout.startswith("dev stack degraded")
    assert "pipeline_coordination is not ready (migrations: database at ['0001']" in shown.stderr
    assert "site_runtime is not ready (no answer from" in shown.stderr
    assert "execution_core is not ready" not in shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines()[1:]}
    assert lines["execution_core"].endswith("  ready")
    assert "not ready (migrations: database at ['0001'], code at ['0002'])" in lines[
        "pipeline_coordination"]
    assert f"not ready (no answer from {gone}" in lines["site_runtime"]

    as_json = run_cli("dev", "status", "--output", "json")
    assert as_json.code == 1
    document = json.loads(as_json.stdout)
    assert document["status"] == "degraded"
    assert document["not_ready"] == ["pipeline_coordination", "site_runtime"]
    assert document["error"]["code"] == "stack-degraded" and document["error"]["exit_code"] == 1
    components = document["components"]
    assert components["execution_core"]["readiness"] == {"ready": True, "checks": {}}
    assert components["pipeline_coordination"]["readiness"]["ready"] is False
    assert components["pipeline_coordination"]["readiness"]["checks"]["migrations"].startswith(
        "database at")
    assert components["site_runtime"]["readiness"]["ready"] is False


def test_every_component_gets_its_own_loopback_ops_address(tmp_path):
    from metallo.devstack.components import Options, plan
    from metallo.devstack.layout import Layout

    components, _missing = plan(with_broker_users(Layout(tmp_path)), Options(executor="local"))
    addresses = [c.env["METALLO_OPS_ADDRESS"] for c in components]
    assert len(set(addresses)) == len(components) == 5
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    assert {c.name: c.ops_url for c in components}["execution_core"] == "http://" + addresses[
        [c.name for c in components].index("execution_core")]


def test_status_is_ready_only_when_every_component_is(monkeypatch, endpoints):
    from metallo.devstack import control

    ready, _behind = endpoints
    live = {"pid": 4242, "status": "ready", "executor": "local",
            "edge_url": "https://127.0.0.1:8443", "components": {
                name: {"pid": 11, "state": "ready", "restarts": 0, "log": f"{name}.log", "ops_url": ready}
                for name in ("execution_core", "site_runtime")}}
    monkeypatch.setattr(control, "running_supervisor", lambda layout: live)
    shown = run_cli("dev", "status")
    assert shown.code == 0, shown.stderr
    assert shown.stdout.startswith("dev stack ready")
