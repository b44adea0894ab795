"""The slurm executor's private journal, ``jobs.sqlite`` (docs/site-runtime.md, Recovery).

One SQLite file in WAL mode. Every write is committed to the WAL before its
call returns, so intent saved before a POST survives ``kill -9`` of the Runtime.
The default ``synchronous=NORMAL`` leaves the fsync to WAL checkpoints: a power
loss may forget the last writes, which the held-submission protocol of
``slurm_submission`` tolerates (a forgotten intent or job id is settled by exact
identity; a duplicate stays held and is cancelled).  ``FULL`` fsyncs every write.

Tables:
* ``attempts`` — the saved preparation (material, binding, staging settings,
  compute partition and GRES, deadline), the first-running flag, the
  whole-chain cancellation intent and its exact result, the terminal
  observation once decided, and the cleanup state;
* ``stages`` — per stage: ``prepared`` → ``submitting`` (intent saved, POST may
  be in flight) → ``held`` (job id saved, not yet released) → ``submitted``;
  or ``refused``.  Also the exact request (script and job, without any
  credential), the job id, the last native facts, and the repository grant's
  progress (``none`` → ``requested`` → ``issued`` → ``released``);
* ``results`` — the exact result of each command, replayed on redelivery.

No member token or repository token is ever written here.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    attempt_number INTEGER NOT NULL,
    site_id TEXT NOT NULL,
    record TEXT NOT NULL,
    reported_running INTEGER NOT NULL DEFAULT 0,
    cancel_state TEXT,
    cancel_result TEXT,
    outcome TEXT,
    cleanup_state TEXT NOT NULL DEFAULT 'none',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS stages (
    attempt_id TEXT NOT NULL REFERENCES attempts(attempt_id),
    stage TEXT NOT NULL,
    state TEXT NOT NULL,
    job_id TEXT,
    request TEXT,
    native TEXT,
    refusal TEXT,
    grant_state TEXT NOT NULL DEFAULT 'none',
    grant_id TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (attempt_id, stage)
);
CREATE TABLE IF NOT EXISTS results (
    command_id TEXT PRIMARY KEY,
    attempt_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    result TEXT NOT NULL
);
"""


@dataclass
class AttemptRow:
    """One ``attempts`` row, JSON columns decoded."""

    attempt_id: str
    run_id: str
    attempt_number: int
    site_id: str
    record: dict[str, Any]
    reported_running: bool
    cancel_state: str | None
    cancel_result: str | None
    outcome: dict[str, Any] | None
    cleanup_state: str
    created_at: float


@dataclass
class StageRow:
    """One ``stages`` row, JSON columns decoded."""

    attempt_id: str
    stage: str
    state: str
    job_id: str | None
    request: dict[str, Any] | None
    native: dict[str, Any] | None
    refusal: dict[str, Any] | None
    grant_state: str
    grant_id: str | None


class SlurmJournal:
    """Durable state of every Attempt this executor handles (``jobs.sqlite``)."""

    def __init__(self, path: Path, *, synchronous: str = "NORMAL") -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError("synchronous is NORMAL or FULL")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # One connection, used from the event loop and from worker threads
        # (asyncio.to_thread) under this lock.
        self._mutex = threading.RLock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)
        self.path.chmod(0o600)

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write, committed to the WAL when the block ends."""
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._mutex:
            return self._db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ results
    def result(self, command_id: str) -> dict[str, Any] | None:
        """The saved result of ``command_id``, if any."""
        rows = self._read("SELECT result FROM results WHERE command_id = ?", (command_id,))
        return json.loads(rows[0][0]) if rows else None

    def save_result(
        self, command_id: str, attempt_id: str, kind: str, result: dict[str, Any]
    ) -> None:
        """Save a command's exact result (first one wins)."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO results (command_id, attempt_id, kind, result) VALUES (?, ?, ?, ?)",
                (command_id, attempt_id, kind, json.dumps(result, sort_keys=True)),
            )

    # ------------------------------------------------------------------ attempts
    def create_attempt(
        self,
        *,
        attempt_id: str,
        run_id: str,
        attempt_number: int,
        site_id: str,
        record: dict[str, Any],
        stages: tuple[str, ...],
    ) -> None:
        """Save a prepared Attempt and its ``prepared`` stage placeholders, atomically."""
        now = time.time()
        with self.transaction() as db:
            db.execute(
                "INSERT INTO attempts (attempt_id, run_id, attempt_number, site_id, record, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    attempt_id,
                    run_id,
                    attempt_number,
                    site_id,
                    json.dumps(record, sort_keys=True),
                    now,
                    now,
                ),
            )
            for stage in stages:
                db.execute(
                    "INSERT INTO stages (attempt_id, stage, state, updated_at) VALUES (?, ?, 'prepared', ?)",
                    (attempt_id, stage, now),
                )

    def attempt(self, attempt_id: str) -> AttemptRow | None:
        """The Attempt, or None when it was never prepared here."""
        rows = self._read(
            "SELECT attempt_id, run_id, attempt_number, site_id, record, reported_running, "
            "cancel_state, cancel_result, outcome, cleanup_state, created_at "
            "FROM attempts WHERE attempt_id = ?",
            (attempt_id,),
        )
        if not rows:
            return None
        row = rows[0]
        return AttemptRow(
            attempt_id=row[0],
            run_id=row[1],
            attempt_number=row[2],
            site_id=row[3],
            record=json.loads(row[4]),
            reported_running=bool(row[5]),
            cancel_state=row[6],
            cancel_result=row[7],
            outcome=json.loads(row[8]) if row[8] else None,
            cleanup_state=row[9],
            created_at=row[10],
        )

    def active_attempts(self) -> list[str]:
        """Attempts without a terminal outcome or with cleanup still pending."""
        rows = self._read(
            "SELECT attempt_id FROM attempts WHERE outcome IS NULL OR cleanup_state = 'pending' "
            "ORDER BY created_at",
            (),
        )
        return [r[0] for r in rows]

    def update_attempt(self, attempt_id: str, **values: Any) -> None:
        """Update columns of one Attempt (JSON-encodes dict values)."""
        self._update("attempts", "attempt_id = ?", (attempt_id,), values)

    # ------------------------------------------------------------------ stages
    def stages(self, attempt_id: str) -> dict[str, StageRow]:
        """The Attempt's stages by name."""
        rows = self._read(
            "SELECT attempt_id, stage, state, job_id, request, native, refusal, grant_state, grant_id "
            "FROM stages WHERE attempt_id = ?",
            (attempt_id,),
        )
        return {
            r[1]: StageRow(
                attempt_id=r[0],
                stage=r[1],
                state=r[2],
                job_id=r[3],
                request=json.loads(r[4]) if r[4] else None,
                native=json.loads(r[5]) if r[5] else None,
                refusal=json.loads(r[6]) if r[6] else None,
                grant_state=r[7],
                grant_id=r[8],
            )
            for r in rows
        }

    def update_stage(self, attempt_id: str, stage: str, **values: Any) -> None:
        """Update columns of one stage (JSON-encodes dict values)."""
        self._update("stages", "attempt_id = ? AND stage = ?", (attempt_id, stage), values)

    def _update(
        self, table: str, where: str, keys: tuple[Any, ...], values: dict[str, Any]
    ) -> None:
        if not values:
            return
        encoded = {
            k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
            for k, v in values.items()
        }
        encoded["updated_at"] = time.time()
        columns = ", ".join(f"{name} = ?" for name in encoded)
        with self.transaction() as db:
            db.execute(f"UPDATE {table} SET {columns} WHERE {where}", (*encoded.values(), *keys))
