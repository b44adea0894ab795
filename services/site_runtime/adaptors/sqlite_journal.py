"""What the Site Runtime's SQLite journals share (docs/site-runtime.md, Journals): the
file (:func:`open_sqlite`), its lifetime (:class:`SqliteJournal`) and the executors'
``results`` table (:class:`ResultJournal`).

- Every journal is one SQLite file, mode 0600, in WAL mode with ``synchronous=FULL``:
  a saved row survives a kill -9 or a power cut of the Runtime.
- ``results`` (the local and kubernetes executors' ``jobs.sqlite``): the exact result
  of each command an executor answered, kept by command id; the first one saved is
  the one replayed, so a command handled again never makes a second native effect.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    command_id TEXT PRIMARY KEY,
    result_json TEXT NOT NULL,
    saved_at TEXT NOT NULL
);
"""


def now_iso() -> str:
    """UTC now as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def open_sqlite(path: Path) -> sqlite3.Connection:
    """Open (creating with mode 0600) a SQLite file in WAL mode with full sync.

    Autocommit mode: callers wrap multi-statement changes in ``with conn:`` transactions.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        path.touch(mode=0o600)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


class SqliteJournal:
    """One journal file opened at ``path`` with the subclass's ``SCHEMA`` applied; each
    method of a subclass is one short transaction."""

    SCHEMA = ""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._conn = open_sqlite(self.path)
        self._conn.executescript(self.SCHEMA)

    def close(self) -> None:
        """Close the file (the journal stays valid on disk)."""
        self._conn.close()


class ResultJournal(SqliteJournal):
    """A journal with the ``results`` table (module doc) beside the subclass's own."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._conn.executescript(RESULTS_SCHEMA)

    def result(self, command_id: str) -> dict[str, Any] | None:
        """The saved result of ``command_id``, or None."""
        row = self._conn.execute(
            "SELECT result_json FROM results WHERE command_id = ?", (command_id,)
        ).fetchone()
        return json.loads(row["result_json"]) if row else None

    def save_result(self, command_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """Save the first result for ``command_id``; return the saved one."""
        self._conn.execute(
            "INSERT OR IGNORE INTO results (command_id, result_json, saved_at) VALUES (?, ?, ?)",
            (command_id, json.dumps(result, sort_keys=True), now_iso()),
        )
        saved = self.result(command_id)
        assert saved is not None
        return saved
