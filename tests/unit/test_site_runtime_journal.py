"""The delivery journal ``delivery.sqlite`` (real SQLite in WAL mode): commands are
saved before acting, the first saved result wins, and everything survives reopening."""

from __future__ import annotations

import sqlite3

import pytest

from site_runtime.adaptors.delivery_journal import SqliteDeliveryJournal
from site_runtime.application.delivery import JournalMismatch
from site_runtime.application.ports import SiteCommand


def command(seq: int, command_id: str = "c-1") -> SiteCommand:
    return SiteCommand(
        seq,
        command_id,
        "prepare",
        "lab-slurm",
        "slurm",
        "run-1",
        "att-1",
        1,
        {"spec": {"command": ["true"]}},
    )


def test_journal_lifecycle_survives_reopening(tmp_path):
    path = tmp_path / "delivery.sqlite"
    journal = SqliteDeliveryJournal(path)
    entry = journal.journal(command(1))
    assert entry.state == "journaled" and entry.command == command(1)
    journal.mark_dispatched(1)
    assert journal.save_result(1, '{"a":1}') == '{"a":1}'
    assert journal.save_result(1, '{"a":2}') == '{"a":1}'  # the first result wins
    journal.progress_reported(1, "runtime-busy")
    journal.progress_reported(1, "runtime-busy")
    journal.close()

    reopened = SqliteDeliveryJournal(path)
    again = reopened.journal(command(1))  # journaling twice is harmless
    assert (again.state, again.result_json, again.reported_codes) == (
        "resulted",
        '{"a":1}',
        frozenset({"runtime-busy"}),
    )
    assert [e.sequence for e in reopened.unfinished()] == [1]
    reopened.mark_acknowledged(1, recorded=True)
    assert reopened.unfinished() == []
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    assert (path.stat().st_mode & 0o077) == 0


def test_another_command_under_a_journaled_sequence_is_refused(tmp_path):
    journal = SqliteDeliveryJournal(tmp_path / "delivery.sqlite")
    journal.journal(command(1, "c-1"))
    with pytest.raises(JournalMismatch) as refused:
        journal.journal(command(1, "c-other"))
    assert journal.entry(1).command.command_id == "c-1"
    # The message says what to do: the journal's path, why, and the way out.
    said = str(refused.value)
    assert "(c-1, not c-other)" in said and str(tmp_path / "delivery.sqlite") in said
    assert "the stream restarted" in said and "move its state directory aside" in said
    assert "metallo dev up --fresh" in said
