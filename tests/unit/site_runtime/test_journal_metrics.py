"""The Runtime's journal sizes on /metrics: bytes per journal file and rows per table,
read only (a missing directory or an unreadable file reports what it can)."""

from __future__ import annotations

import sqlite3

from site_runtime.adaptors.journal_metrics import journal_metrics, journal_sizes


def _journal(path, tables: dict[str, int]) -> None:
    connection = sqlite3.connect(path)
    for table, rows in tables.items():
        connection.execute(f"CREATE TABLE {table} (n INTEGER)")
        connection.executemany(f"INSERT INTO {table} VALUES (?)", [(i,) for i in range(rows)])
    connection.commit()
    connection.close()


def test_bytes_and_rows_of_every_journal(tmp_path):
    _journal(tmp_path / "delivery.sqlite", {"commands": 3, "progress_reports": 0})
    _journal(tmp_path / "jobs.sqlite", {"attempts": 2})
    (tmp_path / "notes.txt").write_text("not a journal")
    sizes, rows = journal_sizes(tmp_path)
    assert [name for name, _ in sizes] == ["delivery", "jobs"]
    assert all(size >= (tmp_path / f"{name}.sqlite").stat().st_size for name, size in sizes)
    assert rows == [("delivery", "commands", 3.0), ("delivery", "progress_reports", 0.0),
                    ("jobs", "attempts", 2.0)]


def test_a_broken_journal_keeps_its_bytes_and_reports_no_rows(tmp_path):
    (tmp_path / "delivery.sqlite").write_bytes(b"not sqlite at all" * 10)
    sizes, rows = journal_sizes(tmp_path)
    assert sizes == [("delivery", 170.0)] and rows == []
    assert journal_sizes(tmp_path / "absent") == ([], [])


async def test_the_collector_serves_both_families(tmp_path):
    _journal(tmp_path / "jobs.sqlite", {"stages": 4})
    families = {f.name: f for f in await journal_metrics(tmp_path)()}
    (size,) = families["metallo_journal_bytes"].samples
    assert size.labels == {"journal": "jobs"} and size.value > 0
    (count,) = families["metallo_journal_rows"].samples
    assert count.labels == {"journal": "jobs", "table": "stages"} and count.value == 4
