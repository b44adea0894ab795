"""docker-compose.yml uses no ``guest``: every container that speaks to RabbitMQ does so
as its own user, whose password file ``compose-broker`` writes beside the broker's
definitions file (no guest, least privilege on the compose virtual host)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from urllib.parse import urlsplit

from ruamel.yaml import YAML

from metallo.devstack.compose_broker import COMPOSE_VHOST, make_principals
from metallo.devstack.rabbitmq import client_permissions, go_api_permissions, service_permissions

ROOT = Path(__file__).resolve().parents[2]
SECRETS = "/var/lib/metallo-dev/secrets"
PLATFORM = {"workload-portfolio": "workload_portfolio", "execution-core": "execution_core",
            "pipeline-coordination": "pipeline_coordination",
            "site-coordination": "site_coordination"}


def services() -> dict:
    return YAML(typ="safe").load((ROOT / "docker-compose.yml").read_text())["services"]


def test_no_container_uses_guest_and_each_service_has_its_own_user():
    users = {}
    for name, svc in services().items():
        env = svc.get("environment") or {}
        url = env.get("METALLO_AMQP_URL")
        if url is None:
            continue
        parts = urlsplit(url)
        assert parts.username is None and parts.password is None, name  # never in the URL
        assert parts.path == f"/{COMPOSE_VHOST}", name
        if name == "cli":
            assert env["METALLO_AMQP_CREDENTIALS_FILE"] == f"{SECRETS}/rabbitmq-cli.json"
            continue
        user = env.get("METALLO_AMQP_USER")
        assert user and user != "guest", f"{name} has no RabbitMQ user of its own"
        assert env["METALLO_AMQP_PASSWORD_FILE"] == f"{SECRETS}/rabbitmq/{user}"
        users[name] = user
    assert {users[n] for n in PLATFORM} == {f"metallo-{m.replace('_', '-')}"
                                            for m in PLATFORM.values()}
    assert len({users[n] for n in PLATFORM}) == len(PLATFORM)  # one user per service
    # Only the bootstrap steps act as the Go API (its bridge queue, the runtime grant).
    assert {n for n, u in users.items() if u == "metallo-go-api"} == {"setup", "runtime-grant"}
    assert "guest:" not in (ROOT / "docker-compose.yml").read_text()  # no guest login anywhere


def test_the_broker_loads_definitions_made_before_it_starts():
    svc = services()
    rabbit = svc["rabbitmq"]
    assert rabbit["depends_on"]["broker-users"]["condition"] == "service_completed_successfully"
    assert svc["broker-users"]["command"][:4] == ["python", "-m", "metallo.devstack",
                                                  "compose-broker"]
    conf = YAML(typ="safe").load((ROOT / "docker-compose.yml").read_text())["configs"]
    assert "load_definitions = /var/lib/metallo-broker/definitions.json" in \
        conf["rabbitmq-definitions"]["content"]


def test_compose_broker_writes_least_privilege_users_and_0600_passwords(tmp_path):
    users = make_principals(str(tmp_path / "dev"), str(tmp_path / "broker" / "definitions.json"))
    document = json.loads((tmp_path / "broker" / "definitions.json").read_text())
    assert document["vhosts"] == [{"name": COMPOSE_VHOST}]
    assert sorted(u["name"] for u in document["users"]) == users
    assert "guest" not in users and all(u["tags"] == [] for u in document["users"])
    perms = {p["user"]: p for p in document["permissions"]}
    assert {p["vhost"] for p in perms.values()} == {COMPOSE_VHOST}
    for module in PLATFORM.values():
        want = service_permissions(module)
        got = perms[f"metallo-{module.replace('_', '-')}"]
        assert (got["configure"], got["write"], got["read"]) == (want.configure, want.write,
                                                                 want.read)
    cli, api = client_permissions(), go_api_permissions()
    assert (perms["metallo-cli"]["read"], perms["metallo-go-api"]["read"]) == (cli.read, api.read)
    secrets = tmp_path / "dev" / "secrets"
    for user in users:
        path = secrets / "rabbitmq" / user
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text().strip() not in json.dumps(document)  # only hashes there
    login = json.loads((secrets / "rabbitmq-cli.json").read_text())
    assert login["username"] == "metallo-cli"
    # A second run keeps every password (a restart keeps the logins).
    before = {u: (secrets / "rabbitmq" / u).read_text() for u in users}
    make_principals(str(tmp_path / "dev"), str(tmp_path / "broker" / "definitions.json"))
    assert before == {u: (secrets / "rabbitmq" / u).read_text() for u in users}
