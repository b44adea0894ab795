"""What the dev stack reads of its Site Runtimes' own state under ``var/dev/runtime/
<executor>/`` (docs/site-runtime.md, Journals): which Attempts each executor's Runtime
started, and whether its delivery journal holds any command at all.

Only ever read here (SQLite read-only), never written: the Runtime owns its journal.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

DELIVERY_JOURNAL = "delivery.sqlite"
#: Command kinds that start an Attempt's native work at the Runtime that takes them.
START_KINDS = ("start", "start-array", "apply")


def _rows(journal: Path, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
    """Rows of a read-only query of ``journal`` ([] when it is missing or unreadable)."""
    if not journal.is_file():
        return []
    try:
        conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return []
    try:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, params).fetchall()
    except sqlite3.Error:
        return []  # no commands table yet: a Runtime that never pulled
    finally:
        conn.close()


def started_attempts(state_dir: Path) -> set[str]:
    """Attempt ids whose start the Runtime with this state directory received (the
    tasks of a ``start-array`` too)."""
    marks = ",".join("?" for _ in START_KINDS)
    started: set[str] = set()
    for row in _rows(state_dir / DELIVERY_JOURNAL,
                     f"SELECT json_extract(command_json, '$.kind') AS kind, command_json "
                     f"FROM commands WHERE json_extract(command_json, '$.kind') IN ({marks})",
                     START_KINDS):
        command = json.loads(row["command_json"])
        if command.get("attempt_id"):
            started.add(str(command["attempt_id"]))
        for task in ((command.get("payload") or {}).get("array") or {}).get("tasks") or []:
            if isinstance(task, dict) and task.get("attempt_id"):
                started.add(str(task["attempt_id"]))
    return started


def journaled_commands(state_dir: Path) -> int:
    """How many commands the Runtime's delivery journal holds (0 when it has none)."""
    rows = _rows(state_dir / DELIVERY_JOURNAL, "SELECT count(*) AS n FROM commands")
    return int(rows[0]["n"]) if rows else 0


def executor_states(runtime_root: Path) -> dict[str, Path]:
    """Each executor's state directory under ``runtime_root`` (``local``, ``slurm``,
    ``kubernetes``) that exists, by executor name."""
    if not runtime_root.is_dir():
        return {}
    return {p.name: p for p in sorted(runtime_root.iterdir()) if p.is_dir()}


def last_journaled(state_dir: Path) -> tuple[int, str] | None:
    """The newest (sequence, command_id) of the Runtime's delivery journal (None: empty)."""
    rows = _rows(state_dir / DELIVERY_JOURNAL,
                 "SELECT sequence, command_id FROM commands ORDER BY sequence DESC LIMIT 1")
    return (int(rows[0]["sequence"]), str(rows[0]["command_id"])) if rows else None


def stream_of(executor: str, site_id: str, k8s_site_id: str) -> tuple[str, str]:
    """The ``(site_id, environment)`` stream an executor's Runtime of the dev stack pulls."""
    return (k8s_site_id, "k8s") if executor == "kubernetes" else (site_id, "slurm")
