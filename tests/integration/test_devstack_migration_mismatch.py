"""``metallo dev up`` on dev databases another checkout migrated: an Alembic revision
this checkout does not have, or tables that are already there, is said plainly with
``metallo dev up --fresh`` as the next step — never as a raw Alembic or SQL error.

The databases are the test's own (real PostgreSQL, real migrations), pointed at by the
``METALLO_<SERVICE>_DATABASE_URL`` variables the dev stack reads; the shared dev
databases are never touched."""

from __future__ import annotations

import json
import socket

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from metallo.devstack import control, prepare
from tests.unit.cli_support import cli


def free_port() -> int:
    """A TCP port nothing listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVICE = "pipeline_coordination"


@pytest.fixture
async def dev_databases(make_database, monkeypatch, tmp_path):
    """Only Pipeline Coordination is migrated, into a fresh database of the test's;
    the dev stack's state lives under ``tmp_path``. Returns the database's URL."""
    url = await make_database(SERVICE)
    monkeypatch.setenv(f"METALLO_{SERVICE.upper()}_DATABASE_URL", url)
    monkeypatch.setenv("METALLO_DEV_STATE", str(tmp_path / "dev"))
    monkeypatch.setattr(prepare, "runnable", lambda service: service == SERVICE)
    return url


async def _run(url: str, *statements: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def test_an_unknown_alembic_revision_says_to_start_fresh(dev_databases):
    await _run(dev_databases,
               "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)",
               "INSERT INTO alembic_version VALUES ('9999_from_another_branch')")

    with pytest.raises(prepare.PrepareError) as refused:
        await prepare.migrate_all(lambda _line: None)

    message = str(refused.value)
    assert "was migrated by another checkout" in message
    assert "9999_from_another_branch" in message and "does not have" in message
    assert refused.value.code == "dev-database-mismatch"
    assert "metallo dev up --fresh" in refused.value.hint


async def test_a_table_that_is_already_there_says_to_start_fresh(dev_databases):
    # Another checkout's schema without its version row: the first migration's
    # CREATE TABLE meets a table of the same name.
    await _run(dev_databases, "CREATE TABLE pipelines (id int)")

    with pytest.raises(prepare.PrepareError) as refused:
        await prepare.migrate_all(lambda _line: None)

    message = str(refused.value)
    assert "was migrated by another checkout" in message
    assert 'relation "pipelines" already exists' in message
    assert "[SQL:" not in message and "Traceback" not in message
    assert "metallo dev up --fresh" in refused.value.hint


async def test_dev_up_prints_the_plain_refusal_and_the_fresh_hint(dev_databases, monkeypatch):
    await _run(dev_databases,
               "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)",
               "INSERT INTO alembic_version VALUES ('9999_from_another_branch')")
    # The Kubernetes lab is not the subject: dev up carries on without it.
    monkeypatch.setattr(control, "ensure_k8s_lab",
                        lambda say: {"running": False, "kubeconfig": "", "detail": ""})

    # A free edge port: the suite's own dev stack may hold 8443 meanwhile.
    done = await cli("dev", "up", "--executor", "local", "--edge-port", str(free_port()), "--output", "json")

    assert done.code == 1, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "dev-database-mismatch"
    assert "was migrated by another checkout" in error["message"]
    assert "Can't locate revision" in error["message"]  # Alembic's words, as the detail only
    assert "metallo dev up --fresh" in error["hint"] and "drops and recreates" in error["hint"]
    assert "Traceback" not in done.stderr
    assert "next: run `metallo dev up --fresh`" in done.stderr
