"""The "PostgreSQL's autovacuum is off" warning: one short line with the command that
fixes it. ``metallo dev up`` says it once for all its service databases, and the
services it starts do not repeat it; a service started on its own still warns when it
migrates, once per process however many databases it migrates (docs/operators.md,
PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metallo.devstack import prepare
from metallo.devstack.components import SERVICES, Options, plan
from metallo.devstack.layout import Layout
from metallo.persistence import migrations
from metallo.persistence.migrations import AUTOVACUUM_CHECKED_ENV, migrate
from tests.unit.devstack_support import with_broker_users

MIGRATIONS = Path(__file__).resolve().parents[2] / "services" / "pipeline_coordination" / "migrations"
WARNING = "autovacuum is off"


@pytest.fixture
def autovacuum_off(monkeypatch):
    """Every database answers that autovacuum cannot run (the check's own query is
    covered by tests/integration/test_persistence_engine.py); the databases asked."""
    asked: list[str] = []

    async def off(url: str) -> bool:
        asked.append(url)
        return False

    monkeypatch.setattr(migrations, "autovacuum_is_on", off)
    monkeypatch.setattr(migrations, "_warned_servers", set())  # a new process
    monkeypatch.delenv(AUTOVACUUM_CHECKED_ENV, raising=False)
    return asked


async def test_dev_up_says_the_warning_once_for_every_database(autovacuum_off, monkeypatch, caplog):
    migrated: list[tuple[str, bool | None]] = []

    async def fake_migrate(url, migrations_dir, revision="head", *, check_autovacuum=None):
        migrated.append((url, check_autovacuum))

    # The migrations themselves are not the subject (and the dev databases are not ours).
    monkeypatch.setattr(migrations, "migrate", fake_migrate)
    monkeypatch.setattr(prepare, "runnable", lambda service: True)
    for service in prepare.SERVICE_DATABASES:
        monkeypatch.setenv(f"METALLO_{service.upper()}_DATABASE_URL",
                           f"postgresql+asyncpg://postgres@127.0.0.1:5432/x_{service}")
    said: list[str] = []
    caplog.set_level("WARNING", logger="metallo.persistence.migrations")

    done = await prepare.migrate_all(said.append)

    assert done == list(prepare.SERVICE_DATABASES)
    assert [check for _url, check in migrated] == [False] * 4  # no per-service warning
    assert len(autovacuum_off) == 4  # yet every database was checked
    warnings = [line for line in said if WARNING in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ")
    assert "\n" not in warnings[0] and len(warnings[0]) < 300  # one short line
    assert ("psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -c 'ALTER SYSTEM SET "
            "autovacuum = on'") in warnings[0]
    assert "'SELECT pg_reload_conf()'" in warnings[0]
    assert WARNING not in caplog.text


async def test_dev_up_says_nothing_when_autovacuum_runs(monkeypatch):
    async def on(_url):
        return True

    async def fake_migrate(url, migrations_dir, revision="head", *, check_autovacuum=None):
        return None

    monkeypatch.setattr(migrations, "autovacuum_is_on", on)
    monkeypatch.setattr(migrations, "migrate", fake_migrate)
    monkeypatch.setattr(prepare, "runnable", lambda service: True)
    said: list[str] = []
    await prepare.migrate_all(said.append)
    assert said == []


def test_the_services_dev_up_starts_are_told_it_checked(tmp_path):
    components, _missing = plan(with_broker_users(Layout(tmp_path / "dev")),
                               Options(executor="local"))
    services = [c for c in components if c.name in SERVICES]
    assert services, "no service of the dev stack in this checkout"
    assert all(c.env.get(AUTOVACUUM_CHECKED_ENV) == "1" for c in services)


async def test_a_service_started_on_its_own_still_warns_once(autovacuum_off, make_database,
                                                              monkeypatch, caplog):
    url = await make_database("autovacuum_warning")
    other = await make_database("autovacuum_warning_2")
    caplog.set_level("WARNING", logger="metallo.persistence.migrations")

    await migrate(url, MIGRATIONS)  # as `python -m pipeline_coordination` at start
    assert caplog.text.count(WARNING) == 1
    assert "ALTER SYSTEM SET autovacuum = on" in caplog.text
    await migrate(other, MIGRATIONS)  # a second database on the same server (benchmarks)
    await migrate(url, MIGRATIONS, check_autovacuum=True)
    assert caplog.text.count(WARNING) == 1  # once per process

    caplog.clear()
    monkeypatch.setattr(migrations, "_warned_servers", set())  # the next process
    monkeypatch.setenv(AUTOVACUUM_CHECKED_ENV, "1")  # started by `metallo dev up`
    await migrate(url, MIGRATIONS)
    await migrate(url, MIGRATIONS, check_autovacuum=False)
    assert WARNING not in caplog.text
    await migrate(url, MIGRATIONS, check_autovacuum=True)  # an explicit request wins
    assert caplog.text.count(WARNING) == 1


def test_the_fix_names_the_urls_server_and_user_but_never_its_password():
    text = migrations.autovacuum_warning("postgresql+asyncpg://svc:s3cret@db.example:6543/x")
    assert "psql -h db.example -p 6543 -U svc -d postgres" in text
    assert "s3cret" not in text
