"""The kubernetes executor's journal ``jobs.sqlite`` (docs/site-runtime.md, Kubernetes).

Tables:

- ``attempts``: one row per prepared Attempt — the prepare payload (no secrets), the
  namespace, the journal state (``prepared``, ``stage-in`` — started, waiting for the
  preparation Pod —, ``compute``, ``stage-out``, ``succeeded``, ``failed``,
  ``cancelled``, ``refused``), the failure code, the output commit, the saved
  cancellation answer, when it ended and when its workspace is due for deletion;
- ``objects``: one row per native object of an Attempt by role (``workspace``,
  ``stage-in``, ``stage-in-secret``, ``compute``, ``stage-out``, ``stage-out-secret``):
  ``state`` is ``intent`` (recorded before the create is sent), ``created`` (with the
  exact ``uid``), ``deleting`` (a delete sent, absence not yet confirmed) or ``deleted`` — a tombstone: a deleted object is never created
  again, so a retry or restart after cleanup cannot bring it back; the stage's
  repository grant id and whether it was released; the stage's end (exit code,
  signal, code);
- ``results``: the exact result of each command, replayed for the same command id
  (:class:`site_runtime.adaptors.sqlite_journal.ResultJournal`).

Repository tokens are never stored: only grant ids.

Commit points: :mod:`.group_commit` (the ``start`` command groups its progress).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from site_runtime.adaptors.kubernetes.group_commit import GroupCommitJournal
from site_runtime.adaptors.sqlite_journal import now_iso

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    attempt_number INTEGER NOT NULL,
    material_json TEXT NOT NULL,
    namespace TEXT NOT NULL,
    state TEXT NOT NULL,
    code TEXT,
    output_commit TEXT,
    cancel_result TEXT,
    ended_at REAL,
    cleanup_due REAL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS objects (
    attempt_id TEXT NOT NULL REFERENCES attempts(attempt_id),
    role TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    uid TEXT,
    grant_id TEXT,
    grant_released INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER,
    signal INTEGER,
    code TEXT,
    ended INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (attempt_id, role)
);
CREATE TABLE IF NOT EXISTS helper_logs (
    attempt_id TEXT NOT NULL REFERENCES attempts(attempt_id),
    stage TEXT NOT NULL,
    start INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (attempt_id, stage)
);
"""
ACTIVE = ("prepared", "stage-in", "compute", "stage-out")
TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class AttemptRow:
    """One ``attempts`` row; ``material`` is the prepare payload."""

    attempt_id: str
    run_id: str
    attempt_number: int
    material: dict[str, Any]
    namespace: str
    state: str
    code: str | None
    output_commit: str | None
    cancel_result: str | None
    ended_at: float | None
    cleanup_due: float | None


@dataclass(frozen=True)
class ObjectRow:
    """One ``objects`` row (see the module doc)."""

    attempt_id: str
    role: str
    kind: str
    name: str
    state: str
    uid: str | None
    grant_id: str | None
    grant_released: bool
    exit_code: int | None
    signal: int | None
    code: str | None
    ended: bool


class KubernetesJournal(GroupCommitJournal):
    """``jobs.sqlite`` of the kubernetes executor; each method is one short transaction
    (inside :meth:`grouped`, progress waits for a commit point: :mod:`.group_commit`)."""

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
            row["namespace"],
            row["state"],
            row["code"],
            row["output_commit"],
            row["cancel_result"],
            row["ended_at"],
            row["cleanup_due"],
        )

    def insert_attempt(
        self,
        attempt_id: str,
        run_id: str,
        attempt_number: int,
        material: dict[str, Any],
        namespace: str,
    ) -> AttemptRow:
        """Insert a ``prepared`` Attempt unless it exists; return the saved row."""
        now = now_iso()
        self._write(
            "INSERT OR IGNORE INTO attempts (attempt_id, run_id, attempt_number, material_json,"
            " namespace, state, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'prepared', ?, ?)",
            (
                attempt_id,
                run_id,
                attempt_number,
                json.dumps(material, sort_keys=True),
                namespace,
                now,
                now,
            ),
        )
        row = self.attempt(attempt_id)
        assert row is not None
        return row

    def set_state(
        self,
        attempt_id: str,
        state: str,
        *,
        code: str | None = None,
        output_commit: str | None = None,
        ended_at: float | None = None,
        cleanup_due: float | None = None,
    ) -> None:
        """Move the Attempt to ``state``; the end facts are kept once set. An active
        ``state`` is progress (:mod:`.group_commit`), an end or refusal a commit point."""
        self._write(
            "UPDATE attempts SET state = ?, code = COALESCE(?, code),"
            " output_commit = COALESCE(?, output_commit), ended_at = COALESCE(?, ended_at),"
            " cleanup_due = COALESCE(?, cleanup_due), updated_at = ? WHERE attempt_id = ?",
            (state, code, output_commit, ended_at, cleanup_due, now_iso(), attempt_id),
            progress=state in ACTIVE,
        )

    def set_cancel_result(self, attempt_id: str, answer: str) -> None:
        """Save the cancellation's answer (its intent, before anything is deleted)."""
        self._write(
            "UPDATE attempts SET cancel_result = ?, updated_at = ? WHERE attempt_id = ?",
            (answer, now_iso(), attempt_id),
        )

    def clear_cleanup(self, attempt_id: str) -> None:
        """The Attempt's cleanup is complete: nothing is due any more."""
        self._write("UPDATE attempts SET cleanup_due = NULL WHERE attempt_id = ?", (attempt_id,))

    def active_attempts(self) -> list[str]:
        """Attempts not yet ended, oldest first."""
        marks = ",".join("?" * len(ACTIVE))
        rows = self._conn.execute(
            f"SELECT attempt_id FROM attempts WHERE state IN ({marks}) ORDER BY created_at", ACTIVE
        )
        return [r["attempt_id"] for r in rows]

    def cleanup_pending(self) -> list[str]:
        """Ended (or refused) Attempts that still have live objects or unreleased grants."""
        rows = self._conn.execute(
            "SELECT DISTINCT a.attempt_id FROM attempts a JOIN objects o ON o.attempt_id = a.attempt_id"
            " WHERE a.state IN ('succeeded','failed','cancelled','refused')"
            " AND (o.state != 'deleted' OR (o.grant_id IS NOT NULL AND o.grant_released = 0))"
        )
        return [r["attempt_id"] for r in rows]

    # ------------------------------------------------------------ helper logs
    def keep_log(self, attempt_id: str, stage: str, start: int, data: bytes) -> None:
        """Keep a helper Pod's log before the Pod is deleted: ``data`` is the log from
        byte ``start`` on (its tail when it was longer than what is kept); the first
        one kept stays."""
        self._write(
            "INSERT OR IGNORE INTO helper_logs (attempt_id, stage, start, data) VALUES (?, ?, ?, ?)",
            (attempt_id, stage, start, data),
        )

    def kept_log(self, attempt_id: str, stage: str) -> tuple[int, bytes] | None:
        """``(start, data)`` of the helper log kept for ``stage``, or None."""
        row = self._conn.execute(
            "SELECT start, data FROM helper_logs WHERE attempt_id = ? AND stage = ?",
            (attempt_id, stage),
        ).fetchone()
        return (int(row["start"]), bytes(row["data"])) if row else None

    # ------------------------------------------------------------ objects
    def object(self, attempt_id: str, role: str) -> ObjectRow | None:
        """The object row of ``role``, or None when nothing was ever intended for it."""
        row = self._conn.execute(
            "SELECT * FROM objects WHERE attempt_id = ? AND role = ?", (attempt_id, role)
        ).fetchone()
        return _object(row) if row else None

    def objects(self, attempt_id: str) -> list[ObjectRow]:
        """Every object row of the Attempt."""
        rows = self._conn.execute(
            "SELECT * FROM objects WHERE attempt_id = ? ORDER BY rowid", (attempt_id,)
        )
        return [_object(r) for r in rows]

    def intent(self, attempt_id: str, role: str, kind: str, name: str) -> ObjectRow:
        """Record the intent to create ``role`` (durable before the request is sent:
        progress in a grouped block, then :meth:`durable`); idempotent."""
        self._write(
            "INSERT OR IGNORE INTO objects (attempt_id, role, kind, name, state) VALUES (?, ?, ?, ?, 'intent')",
            (attempt_id, role, kind, name),
            progress=True,
        )
        row = self.object(attempt_id, role)
        assert row is not None
        return row

    def created(self, attempt_id: str, role: str, uid: str) -> None:
        """The object exists with ``uid`` (created or adopted)."""
        self._write(
            "UPDATE objects SET state = 'created', uid = ? WHERE attempt_id = ? AND role = ? AND state != 'deleted'",
            (uid, attempt_id, role),
            progress=True,
        )

    def deleting(self, attempt_id: str, role: str) -> None:
        """A delete of the object is about to be sent (kept until its absence is confirmed)."""
        self._write(
            "UPDATE objects SET state = 'deleting' WHERE attempt_id = ? AND role = ? AND state = 'created'",
            (attempt_id, role),
        )

    def deleted(self, attempt_id: str, role: str) -> None:
        """The object is gone: its tombstone (it is never created again)."""
        self._write(
            "UPDATE objects SET state = 'deleted' WHERE attempt_id = ? AND role = ?",
            (attempt_id, role),
        )

    def tombstone(self, attempt_id: str, role: str, kind: str, name: str) -> None:
        """Mark ``role`` as never to be created (an intent that must not go ahead)."""
        self.intent(attempt_id, role, kind, name)
        self.deleted(attempt_id, role)

    def reopen(self, attempt_id: str, role: str) -> None:
        """A deleted half-made object (a Secret holding a replaced grant) may be created
        once more: back to ``intent``. Only for Secrets, never for stage objects."""
        self._write(
            "UPDATE objects SET state = 'intent', uid = NULL WHERE attempt_id = ? AND role = ?"
            " AND role LIKE '%-secret'",
            (attempt_id, role),
        )

    def set_grant(self, attempt_id: str, role: str, grant_id: str) -> None:
        """Journal the stage's repository grant id (never its token)."""
        self._write(
            "UPDATE objects SET grant_id = ?, grant_released = 0 WHERE attempt_id = ? AND role = ?",
            (grant_id, attempt_id, role),
        )

    def grant_released(self, attempt_id: str, role: str) -> None:
        """The stage's grant was revoked at the edge."""
        self._write(
            "UPDATE objects SET grant_released = 1 WHERE attempt_id = ? AND role = ?",
            (attempt_id, role),
        )

    def ended(
        self,
        attempt_id: str,
        role: str,
        exit_code: int | None,
        signal: int | None,
        code: str | None,
    ) -> None:
        """Save how the stage's Pod or Job ended (the first end recorded stays)."""
        self._write(
            "UPDATE objects SET ended = 1, exit_code = ?, signal = ?, code = ?"
            " WHERE attempt_id = ? AND role = ? AND ended = 0",
            (exit_code, signal, code, attempt_id, role),
            progress=True,
        )


def _object(row: Any) -> ObjectRow:
    return ObjectRow(
        row["attempt_id"],
        row["role"],
        row["kind"],
        row["name"],
        row["state"],
        row["uid"],
        row["grant_id"],
        bool(row["grant_released"]),
        row["exit_code"],
        row["signal"],
        row["code"],
        bool(row["ended"]),
    )
