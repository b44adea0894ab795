"""``metallo dev up`` compares each Site Runtime's journal under ``var/dev/runtime`` with
the stream Site Coordination holds: a journal of a stream that is gone (the dev
databases were dropped: the new stream numbers from 1 again) is cleared and said, so
the Runtime does not crash-loop on "sequence 1 is journaled with another command_id";
one that disagrees with a stream that still holds commands is refused with the
``--fresh`` hint.

Site Coordination's database is the test's own (real PostgreSQL, real migrations),
pointed at by ``METALLO_SITE_COORDINATION_DATABASE_URL``; the dev stack's state lives
under ``tmp_path``. The journals are written by the Runtime's own journal class."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from metallo.devstack import control, prepare
from metallo.devstack.components import Options
from metallo.devstack.layout import Layout
from site_runtime.adaptors.delivery_journal import SqliteDeliveryJournal
from site_runtime.application.ports import SiteCommand
from tests.unit.cli_support import cli


def free_port() -> int:
    """A TCP port nothing listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


pytestmark = pytest.mark.integration

SERVICE = "site_coordination"
MIGRATIONS = Path(__file__).resolve().parents[2] / "services" / SERVICE / "migrations"


@pytest.fixture
async def sc_database(make_database, monkeypatch, tmp_path):
    """Only Site Coordination, migrated, in a database of the test's; returns its URL."""
    url = await make_database(SERVICE, MIGRATIONS)
    monkeypatch.setenv(f"METALLO_{SERVICE.upper()}_DATABASE_URL", url)
    monkeypatch.setenv("METALLO_DEV_STATE", str(tmp_path / "dev"))
    monkeypatch.setattr(prepare, "runnable", lambda service: service == SERVICE)
    return url


def _journal(layout: Layout, executor: str, command_id: str, sequence: int = 1) -> Path:
    state = layout.runtime / executor
    journal = SqliteDeliveryJournal(state / "delivery.sqlite")
    try:
        journal.journal(SiteCommand(sequence=sequence, command_id=command_id, kind="prepare",
                                    site_id="lab-slurm", environment="slurm", run_id="r1",
                                    attempt_id="a1", attempt_number=1))
    finally:
        journal.close()
    return state


async def _issue(url: str, command_id: str, sequence: int = 1) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(
                "INSERT INTO site_commands (command_id, site_id, environment, sequence, kind,"
                " run_id, attempt_id, attempt_number, payload_json, request_hash)"
                " VALUES (:c, 'lab-slurm', 'slurm', :s, 'prepare', 'r1', 'a1', 1, '{}', 'h')"),
                {"c": command_id, "s": sequence})
    finally:
        await engine.dispose()


async def test_a_journal_of_a_stream_that_is_gone_is_cleared_and_said(sc_database):
    layout = Layout.default()
    layout.make()
    stale = _journal(layout, "slurm", "c-of-the-dropped-stream")
    kept = _journal(layout, "local", "c-issued")
    await _issue(sc_database, "c-issued")
    # The local journal matches the stream: kept. The stream holds commands, so the Slurm
    # journal disagreeing with it is refused, not guessed.
    with pytest.raises(prepare.PrepareError) as refused:
        await prepare.check_runtime_journals(layout, Options(executor="slurm"), lambda _m: None)
    assert refused.value.code == "dev-runtime-journal-stale"
    assert "slurm Site Runtime's journal" in str(refused.value) and str(stale) in str(refused.value)
    assert "metallo dev up --fresh" in refused.value.hint
    assert stale.is_dir() and kept.is_dir()

    # Once Site Coordination holds no command of the stream (its database is new), the
    # journals of it belong to a stream that is gone: cleared, and said.
    await _run(sc_database, "DELETE FROM site_commands")
    said: list[str] = []
    cleared = await prepare.check_runtime_journals(layout, Options(executor="slurm"), said.append)
    assert sorted(cleared) == ["local", "slurm"]
    assert not stale.exists() and not kept.exists()
    assert any("cleared the slurm Site Runtime's journal" in line and "database is new" in line
               and "scancel" in line for line in said)


async def _run(url: str, statement: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def test_dev_up_refuses_a_journal_the_stream_contradicts_with_the_fresh_hint(
    sc_database, monkeypatch
):
    _journal(Layout.default(), "local", "c-old")
    await _issue(sc_database, "c-new")
    monkeypatch.setattr(control, "ensure_k8s_lab",
                        lambda say: {"running": False, "kubeconfig": "", "detail": ""})

    # A free edge port: the suite's own dev stack may hold 8443 meanwhile.
    done = await cli("dev", "up", "--executor", "local", "--edge-port", str(free_port()), "--output", "json")

    assert done.code == 1, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "dev-runtime-journal-stale"
    assert "does not match Site Coordination's (lab-slurm, slurm) stream" in error["message"]
    assert "metallo dev up --fresh" in error["hint"]
    assert "Traceback" not in done.stderr
