"""The local executor's journal ``jobs.sqlite`` (docs/site-runtime.md,
Recovery: a restart never reruns a finished phase).

Tables:

- ``attempts``: one row per prepared Attempt — the prepare command's material (the
  payload JSON, no secrets), the workspace path, the journal state (``prepared``,
  ``waiting`` — started, waiting for a free slot —, ``stage-in``, ``compute``,
  ``stage-out``, ``succeeded``, ``failed``, ``cancelled``) and the saved cancellation
  result;
- ``stages``: one row per launched stage — state (``launching``, ``running``,
  ``succeeded``, ``failed``, ``cancelled``), runner pid and its start time in clock
  ticks (for re-adoption), launch count, the repository grant id and whether it was
  released, exit code, signal, code and output commit;
- ``results``: the exact result of each command the executor answered, replayed for
  the same command_id (prepare, start, cancel are idempotent by it;
  :class:`site_runtime.adaptors.sqlite_journal.ResultJournal`).

Repository tokens are never stored: only grant ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from site_runtime.adaptors.sqlite_journal import ResultJournal, now_iso
from site_runtime.domain.local_batch import StageFacts

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    attempt_number INTEGER NOT NULL,
    material_json TEXT NOT NULL,
    workspace TEXT NOT NULL,
    state TEXT NOT NULL,
    cancel_result TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS stages (
    attempt_id TEXT NOT NULL REFERENCES attempts(attempt_id),
    stage TEXT NOT NULL,
    state TEXT NOT NULL,
    pid INTEGER,
    start_ticks INTEGER,
    launches INTEGER NOT NULL DEFAULT 0,
    grant_id TEXT,
    grant_released INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER,
    signal INTEGER,
    code TEXT,
    output_commit TEXT,
    launched_at TEXT,
    finished_at TEXT,
    PRIMARY KEY (attempt_id, stage)
);
-- The grants still to release (a handful at most; the journal keeps every stage ever run).
CREATE INDEX IF NOT EXISTS stages_unreleased ON stages (attempt_id)
    WHERE grant_id IS NOT NULL AND grant_released = 0;
"""


@dataclass(frozen=True)
class AttemptRow:
    """One ``attempts`` row; ``material`` is the prepare payload."""

    attempt_id: str
    run_id: str
    attempt_number: int
    material: dict[str, Any]
    workspace: Path
    state: str
    cancel_result: str | None


@dataclass(frozen=True)
class StageRow:
    """One ``stages`` row (see the module doc)."""

    attempt_id: str
    stage: str
    state: str
    pid: int | None
    start_ticks: int | None
    launches: int
    grant_id: str | None
    grant_released: bool
    exit_code: int | None
    signal: int | None
    code: str | None
    output_commit: str | None
    launched_at: str | None

    def facts(self) -> StageFacts:
        """The stage as the pure rules see it."""
        return StageFacts(
            self.stage,
            self.state,
            self.pid,
            self.exit_code,
            self.signal,
            self.code,
            self.output_commit,
        )


class LocalJobsJournal(ResultJournal):
    """``jobs.sqlite`` (see module doc). Each method is one short transaction."""

    SCHEMA = _SCHEMA

    # ------------------------------------------------------------ attempts
    def attempt(self, attempt_id: str) -> AttemptRow | None:
        """The Attempt row, or None when this Runtime never prepared it."""
        row = self._conn.execute(
            "SELECT * FROM attempts WHERE attempt_id = ?", (attempt_id,)
        ).fetchone()
        if row is None:
            return None
        return AttemptRow(
            row["attempt_id"],
            row["run_id"],
            row["attempt_number"],
            json.loads(row["material_json"]),
            Path(row["workspace"]),
            row["state"],
            row["cancel_result"],
        )

    def insert_attempt(
        self,
        attempt_id: str,
        run_id: str,
        attempt_number: int,
        material: dict[str, Any],
        workspace: Path,
    ) -> AttemptRow:
        """Insert a ``prepared`` Attempt unless it exists; return the saved row."""
        now = now_iso()
        self._conn.execute(
            "INSERT OR IGNORE INTO attempts (attempt_id, run_id, attempt_number, material_json,"
            " workspace, state, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'prepared', ?, ?)",
            (
                attempt_id,
                run_id,
                attempt_number,
                json.dumps(material, sort_keys=True),
                str(workspace),
                now,
                now,
            ),
        )
        row = self.attempt(attempt_id)
        assert row is not None
        return row

    def set_state(self, attempt_id: str, state: str, cancel_result: str | None = None) -> None:
        """Set the Attempt's journal state (and the saved cancellation answer, when given)."""
        if cancel_result is None:
            self._conn.execute(
                "UPDATE attempts SET state = ?, updated_at = ? WHERE attempt_id = ?",
                (state, now_iso(), attempt_id),
            )
        else:
            self._conn.execute(
                "UPDATE attempts SET state = ?, cancel_result = ?, updated_at = ?"
                " WHERE attempt_id = ?",
                (state, cancel_result, now_iso(), attempt_id),
            )

    def waiting_attempts(self) -> list[str]:
        """Ids of Attempts whose start was accepted and which wait for a free slot, in
        the order they began waiting."""
        rows = self._conn.execute(
            "SELECT attempt_id FROM attempts WHERE state = 'waiting' ORDER BY updated_at, rowid"
        )
        return [r["attempt_id"] for r in rows]

    def active_attempts(self) -> list[str]:
        """Ids of Attempts in stage-in, compute or stage-out, oldest first."""
        rows = self._conn.execute(
            "SELECT attempt_id FROM attempts WHERE state IN "
            "('stage-in', 'compute', 'stage-out') ORDER BY created_at"
        )
        return [r["attempt_id"] for r in rows]

    # ------------------------------------------------------------ stages
    def stages(self, attempt_id: str) -> list[StageRow]:
        """The Attempt's stage rows in stage order."""
        rows = self._conn.execute(
            "SELECT * FROM stages WHERE attempt_id = ? ORDER BY CASE stage "
            "WHEN 'stage-in' THEN 1 WHEN 'compute' THEN 2 ELSE 3 END",
            (attempt_id,),
        ).fetchall()
        return [self._stage(r) for r in rows]

    def stage(self, attempt_id: str, stage: str) -> StageRow | None:
        """One stage row, or None when the stage was never intended."""
        row = self._conn.execute(
            "SELECT * FROM stages WHERE attempt_id = ? AND stage = ?", (attempt_id, stage)
        ).fetchone()
        return self._stage(row) if row else None

    @staticmethod
    def _stage(r) -> StageRow:
        return StageRow(
            r["attempt_id"],
            r["stage"],
            r["state"],
            r["pid"],
            r["start_ticks"],
            r["launches"],
            r["grant_id"],
            bool(r["grant_released"]),
            r["exit_code"],
            r["signal"],
            r["code"],
            r["output_commit"],
            r["launched_at"],
        )

    def launch_intent(self, attempt_id: str, stage: str) -> StageRow:
        """Record that ``stage`` is to be launched (before anything native): the stage
        row in state ``launching`` (launch count 0) and the Attempt in that stage."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(
                "INSERT OR IGNORE INTO stages (attempt_id, stage, state, launches, launched_at)"
                " VALUES (?, ?, 'launching', 0, ?)",
                (attempt_id, stage, now_iso()),
            )
            self._conn.execute(
                "UPDATE attempts SET state = ?, updated_at = ? WHERE attempt_id = ?",
                (stage, now_iso(), attempt_id),
            )
        row = self.stage(attempt_id, stage)
        assert row is not None
        return row

    def count_launch(self, attempt_id: str, stage: str) -> None:
        """A runner process is about to be started for ``stage``."""
        self._conn.execute(
            "UPDATE stages SET launches = launches + 1, launched_at = ? "
            "WHERE attempt_id = ? AND stage = ?",
            (now_iso(), attempt_id, stage),
        )

    def set_grant(
        self, attempt_id: str, stage: str, grant_id: str | None, released: bool = False
    ) -> None:
        """Record the stage's repository grant id (never its token)."""
        self._conn.execute(
            "UPDATE stages SET grant_id = ?, grant_released = ? WHERE attempt_id = ? AND stage = ?",
            (grant_id, int(released), attempt_id, stage),
        )

    def grant_released(self, attempt_id: str, stage: str) -> None:
        """The stage's repository grant was revoked at the edge."""
        self._conn.execute(
            "UPDATE stages SET grant_released = 1 WHERE attempt_id = ? AND stage = ?",
            (attempt_id, stage),
        )

    def unreleased_grants(self, limit: int) -> list[tuple[str, str, str]]:
        """Up to ``limit`` (attempt_id, stage, grant_id) of ended stages whose grant is
        not released yet (a launching or running stage still needs its grant)."""
        rows = self._conn.execute(
            "SELECT attempt_id, stage, grant_id FROM stages "
            "WHERE grant_id IS NOT NULL AND grant_released = 0 "
            "AND state NOT IN ('launching', 'running') ORDER BY rowid LIMIT ?",
            (limit,),
        ).fetchall()
        return [(r["attempt_id"], r["stage"], r["grant_id"]) for r in rows]

    def running(self, attempt_id: str, stage: str, pid: int, start_ticks: int | None) -> None:
        """The stage's runner is ``pid`` started at ``start_ticks`` (set again when a
        restart re-adopts the runner that claimed the stage)."""
        self._conn.execute(
            "UPDATE stages SET state = 'running', pid = ?, start_ticks = ? "
            "WHERE attempt_id = ? AND stage = ? AND state IN "
            "('launching', 'running')",
            (pid, start_ticks, attempt_id, stage),
        )

    def finish_stage(
        self,
        attempt_id: str,
        stage: str,
        state: str,
        *,
        exit_code: int | None,
        signal: int | None,
        code: str | None,
        output_commit: str | None,
    ) -> None:
        """Record a stage's end (only once: a finished stage is never changed)."""
        self._conn.execute(
            "UPDATE stages SET state = ?, exit_code = ?, signal = ?, code = ?, output_commit = ?,"
            " finished_at = ? WHERE attempt_id = ? AND stage = ? AND state IN "
            "('launching', 'running')",
            (state, exit_code, signal, code, output_commit, now_iso(), attempt_id, stage),
        )
