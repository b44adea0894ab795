"""Every process of the dev stack serves /readyz, and `metallo dev status` shows it:
the four services ready with their database, migrations, broker and consumers
checks, the Site Runtimes with their workers."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import metallo

pytestmark = pytest.mark.e2e
SERVICE_CHECKS = {"database": "ok", "migrations": "ok", "broker": "ok", "consumers": "ok"}


def test_dev_status_shows_every_component_ready(local_stack):
    deadline = time.monotonic() + 90
    while True:
        done = metallo("dev", "status", "--output", "json", timeout=60)
        assert done.code == 0, done.stderr
        components = done.json()["components"]
        readiness = {name: c.get("readiness") for name, c in components.items()}
        if all(r and r["ready"] for r in readiness.values()) or time.monotonic() > deadline:
            break
        time.sleep(2)
    # The lab-k8s Runtime runs beside the first whenever the Kubernetes lab is up.
    assert set(readiness) - {"site_runtime_k8s"} == {
        "site_coordination", "workload_portfolio", "execution_core", "pipeline_coordination",
        "site_runtime"}
    for name, r in readiness.items():
        want = {"worker": "ok"} if name.startswith("site_runtime") else SERVICE_CHECKS
        assert r == {"ready": True, "checks": want}, (name, r)
    table = metallo("dev", "status", timeout=60)
    assert table.code == 0
    assert all(line.rstrip().endswith("ready") for line in table.stdout.splitlines()[1:]
               if line.strip()), table.stdout
