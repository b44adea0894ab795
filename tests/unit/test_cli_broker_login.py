"""The CLI's RabbitMQ login: its own user, read from a 0600 credentials file (the one
``metallo dev up`` writes by default), never from a command line or printed."""

from __future__ import annotations

import json
import os

import pytest

from metallo.cli.exits import CliError, Exit
from metallo.cli.settings import connection, redacted_url
from metallo.devstack.layout import write_secret

SECRET = "s3cr3t-Pa55/word"


@pytest.fixture(autouse=True)
def environment(monkeypatch, tmp_path):
    for name in ("METALLO_AMQP_URL", "METALLO_AMQP_CREDENTIALS_FILE", "METALLO_CLI_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("METALLO_DEV_STATE", str(tmp_path / "dev"))
    monkeypatch.setenv("METALLO_CONFIG", str(tmp_path / "absent.toml"))


def login_file(path, mode=0o600, **data):
    path.parent.mkdir(parents=True, exist_ok=True)
    write_secret(path, json.dumps(data or {"username": "metallo-cli", "password": SECRET}))
    os.chmod(path, mode)
    return path


def test_by_default_the_cli_is_the_dev_stacks_metallo_cli_user_on_its_vhost(tmp_path):
    login_file(tmp_path / "dev" / "secrets" / "rabbitmq-cli.json")
    url = connection({}).amqp_url
    assert url == "amqp://metallo-cli:s3cr3t-Pa55%2Fword@127.0.0.1:5672/metallo-dev"
    assert "guest" not in url and SECRET not in redacted_url(url)


def test_a_named_credentials_file_and_url_are_used(tmp_path, monkeypatch):
    path = login_file(tmp_path / "mine.json", username="alice-client", password="pw")
    monkeypatch.setenv("METALLO_AMQP_CREDENTIALS_FILE", str(path))
    monkeypatch.setenv("METALLO_AMQP_URL", "amqp://broker.example:5671/metallo")
    assert connection({}).amqp_url == "amqp://alice-client:pw@broker.example:5671/metallo"


def test_a_login_others_may_read_is_refused_without_echoing_it(tmp_path):
    login_file(tmp_path / "dev" / "secrets" / "rabbitmq-cli.json", mode=0o644)
    with pytest.raises(CliError) as refused:
        connection({})
    assert refused.value.exit_code == Exit.USAGE and "chmod 600" in str(refused.value.hint)
    assert SECRET not in str(refused.value) + str(refused.value.hint)


def test_no_login_says_to_run_dev_up(tmp_path):
    with pytest.raises(CliError) as refused:
        connection({})
    assert "metallo dev up" in refused.value.hint


def test_a_login_without_a_password_is_refused(tmp_path):
    login_file(tmp_path / "dev" / "secrets" / "rabbitmq-cli.json", username="metallo-cli")
    with pytest.raises(CliError) as refused:
        connection({})
    assert "no username and password" in str(refused.value)


def test_a_refused_login_says_so_without_the_password(monkeypatch, tmp_path):
    from tests.bus import BUS
    from tests.unit.cli_support import run_cli

    login_file(tmp_path / "dev" / "secrets" / "rabbitmq-cli.json",
               username=BUS.user("cli"), password=SECRET)  # the right user, a wrong password
    monkeypatch.setenv("METALLO_AMQP_URL", BUS.base_url())
    monkeypatch.setenv("METALLO_TOPOLOGY_PREFIX", "t0123456789.")
    monkeypatch.setenv("METALLO_PROJECT", "demo")
    monkeypatch.setenv("METALLO_CREDENTIALS_FILE", str(tmp_path / "none.json"))
    BUS.create()
    done = run_cli("run", "show", "r-00000000000000000000000000", "--output", "json")
    assert done.code == 2, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "broker-refused"
    assert SECRET not in done.stdout + done.stderr
