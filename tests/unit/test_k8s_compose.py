"""docker-compose.yml, checked offline: the same stack as ``metallo dev up`` —
every service runs a real ``python -m`` entry, waits for the setup step, has a
health check, and the runtime trusts the edge it talks to."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return YAML(typ="safe").load((ROOT / "docker-compose.yml").read_text())


def test_services_run_real_entries_after_setup():
    services = compose()["services"]
    platform = {"workload-portfolio": "workload_portfolio", "execution-core": "execution_core",
                "pipeline-coordination": "pipeline_coordination",
                "site-coordination": "site_coordination", "site-runtime": "site_runtime"}
    assert set(platform) | {"postgres", "rabbitmq", "broker-users", "setup", "runtime-grant",
                            "cli"} == set(services)
    for name, module in platform.items():
        svc = services[name]
        assert svc["command"][:3] == ["python", "-m", module]
        assert (ROOT / "services" / module / "__main__.py").exists()
        assert svc["depends_on"]["setup"]["condition"] == "service_completed_successfully"
        if name != "site-runtime":
            test = svc["healthcheck"]["test"]
            assert test[0] == "CMD"
            if "metallo.devstack.probe" in test:
                assert test[-1] == f"{module}.commands"
    setup = services["setup"]["command"]
    assert setup[:4] == ["python", "-m", "metallo.devstack", "compose-setup"]
    assert importlib.util.find_spec("metallo.devstack.compose") is not None


def test_runtime_reaches_the_edge_with_its_grant_and_ca():
    services = compose()["services"]
    runtime = services["site-runtime"]["environment"]
    edge = services["site-coordination"]["environment"]
    assert runtime["SITE_API_URL"] == f"https://site-coordination:{edge['METALLO_SITE_EDGE_PORT']}"
    assert runtime["SITE_API_CA_FILE"].startswith("/var/lib/metallo-dev/certs/")
    assert runtime["SITE_API_CREDENTIAL_FILE"] == "/var/lib/metallo-dev/secrets/runtime-grant"
    assert "METALLO_POSTGRES_URL" not in runtime and "METALLO_AMQP_URL" not in runtime
    assert services["site-runtime"]["depends_on"]["site-coordination"]["condition"] == "service_healthy"
    # The grant is an operator command to a serving Site Coordination, before the Runtime.
    grant = services["runtime-grant"]
    assert grant["command"][:4] == ["python", "-m", "metallo.devstack", "compose-grant"]
    assert grant["depends_on"]["site-coordination"]["condition"] == "service_healthy"
    assert (services["site-runtime"]["depends_on"]["runtime-grant"]["condition"]
            == "service_completed_successfully")
    assert "ports" not in services["site-runtime"]
