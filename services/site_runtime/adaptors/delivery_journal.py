"""The delivery journal ``delivery.sqlite`` (docs/site-runtime.md, Journals): every pulled command is
saved before the Runtime acts on it, and its exact result before it is reported.

SQLite in WAL mode with ``synchronous=FULL``: a saved row survives a kill -9 or a
power cut of the Runtime. Each write is its own short transaction; nothing here
talks to the network. Tables:

- ``commands``: sequence (primary key), command_id, the command as canonical JSON,
  state (journaled | dispatched | resulted | acknowledged | conflict), the exact
  result JSON, timestamps (UTC ISO 8601);
- ``progress_reports``: (sequence, code) pairs the edge accepted (docs/site-runtime.md, Deferral codes: once per
  command and code).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from datetime import UTC, datetime

from site_runtime.adaptors.sqlite_journal import SqliteJournal
from site_runtime.application.delivery import JournalEntry, JournalMismatch
from site_runtime.application.ports import SiteCommand

_SCHEMA = """
CREATE TABLE IF NOT EXISTS commands (
    sequence INTEGER PRIMARY KEY,
    command_id TEXT NOT NULL,
    command_json TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN
        ('journaled', 'dispatched', 'resulted', 'acknowledged', 'conflict')),
    result_json TEXT,
    journaled_at TEXT NOT NULL,
    resulted_at TEXT,
    acknowledged_at TEXT
);
CREATE TABLE IF NOT EXISTS progress_reports (
    sequence INTEGER NOT NULL REFERENCES commands(sequence),
    code TEXT NOT NULL,
    reported_at TEXT NOT NULL,
    PRIMARY KEY (sequence, code)
);
"""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def command_json(command: SiteCommand) -> str:
    """A command as canonical JSON (sorted keys, compact)."""
    return json.dumps(asdict(command), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class SqliteDeliveryJournal(SqliteJournal):
    """:class:`~site_runtime.application.delivery.DeliveryJournal` over ``delivery.sqlite``."""

    SCHEMA = _SCHEMA

    def _entry(self, row: sqlite3.Row | None) -> JournalEntry | None:
        if row is None:
            return None
        codes = {
            r["code"]
            for r in self._conn.execute(
                "SELECT code FROM progress_reports WHERE sequence = ?", (row["sequence"],)
            )
        }
        return JournalEntry(
            sequence=row["sequence"],
            command=SiteCommand(**json.loads(row["command_json"])),
            state=row["state"],
            result_json=row["result_json"],
            reported_codes=frozenset(codes),
        )

    def entry(self, sequence: int) -> JournalEntry | None:
        """See DeliveryJournal."""
        row = self._conn.execute(
            "SELECT * FROM commands WHERE sequence = ?", (sequence,)
        ).fetchone()
        return self._entry(row)

    def entries(self) -> list[JournalEntry]:
        """Every entry, oldest first (operators and tests)."""
        rows = self._conn.execute("SELECT * FROM commands ORDER BY sequence").fetchall()
        return [self._entry(r) for r in rows]  # type: ignore[misc]

    def unfinished(self) -> list[JournalEntry]:
        """See DeliveryJournal."""
        rows = self._conn.execute(
            "SELECT * FROM commands WHERE state NOT IN ('acknowledged', 'conflict') "
            "ORDER BY sequence"
        ).fetchall()
        return [self._entry(r) for r in rows]  # type: ignore[misc]

    def journal(self, command: SiteCommand) -> JournalEntry:
        """See DeliveryJournal (raises JournalMismatch)."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            row = self._conn.execute(
                "SELECT command_id FROM commands WHERE sequence = ?", (command.sequence,)
            ).fetchone()
            if row is None:
                self._conn.execute(
                    "INSERT INTO commands (sequence, command_id, command_json, state, "
                    "journaled_at) VALUES (?, ?, ?, 'journaled', ?)",
                    (command.sequence, command.command_id, command_json(command), _now()),
                )
            elif row["command_id"] != command.command_id:
                raise JournalMismatch(
                    f"sequence {command.sequence} is journaled with another command_id "
                    f"({row['command_id']}, not {command.command_id}): this journal "
                    f"({self.path}) belongs to another stream, or the stream restarted (Site "
                    "Coordination's database is new or was restored). Stop the Runtime, move "
                    "its state directory aside and start it again; native work of the old "
                    "stream is then not adopted (with the dev stack: `metallo dev up --fresh`)"
                )
        entry = self.entry(command.sequence)
        assert entry is not None
        return entry

    def mark_dispatched(self, sequence: int) -> None:
        """See DeliveryJournal."""
        self._conn.execute(
            "UPDATE commands SET state = 'dispatched' WHERE sequence = ? AND state = 'journaled'",
            (sequence,),
        )

    def save_result(self, sequence: int, result_json: str) -> str:
        """See DeliveryJournal: the first saved result wins and is returned."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(
                "UPDATE commands SET state = 'resulted', result_json = ?, resulted_at = ? "
                "WHERE sequence = ? AND result_json IS NULL",
                (result_json, _now(), sequence),
            )
            row = self._conn.execute(
                "SELECT result_json FROM commands WHERE sequence = ?", (sequence,)
            ).fetchone()
        return row["result_json"]

    def mark_acknowledged(self, sequence: int, recorded: bool) -> None:
        """See DeliveryJournal."""
        self._conn.execute(
            "UPDATE commands SET state = 'acknowledged', acknowledged_at = ? "
            "WHERE sequence = ? AND result_json IS NOT NULL",
            (_now(), sequence),
        )

    def mark_conflict(self, sequence: int) -> None:
        """See DeliveryJournal."""
        self._conn.execute("UPDATE commands SET state = 'conflict' WHERE sequence = ?", (sequence,))

    def progress_reported(self, sequence: int, code: str) -> None:
        """See DeliveryJournal."""
        self._conn.execute(
            "INSERT OR IGNORE INTO progress_reports (sequence, code, reported_at) VALUES (?, ?, ?)",
            (sequence, code, _now()),
        )
