"""Array groups in the slurm executor's journal, ``jobs.sqlite`` (ADR 0032).

Tables beside :class:`~site_runtime.adaptors.slurm.journal.SlurmJournal`'s, in the
same WAL file and under its lock:

* ``array_groups`` — a group's task index ↔ Attempt mapping (a JSON list; index =
  position) and ``max_active``, saved before any of its arrays is submitted;
* ``array_stages`` — per group and stage, the held-submission states of single
  chains: ``prepared`` → ``submitting`` (intent and exact request saved before the
  POST) → ``held`` (array job id saved) → ``submitted`` (released); or ``refused``;
* ``array_members`` — each child's group and task index (saved with the group), so
  any command of a child finds its group.

Once all three arrays are released, :meth:`ArrayJournal.assign_tasks` gives each
child's own ``stages`` rows its tasks (``JOBID_TASK``, ``submitted``) and its record
``array: {group_id, index}``, in one transaction: from then on the child is observed,
cancelled and read by the single-chain paths, through its task ids.

No member token or repository token is ever written here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from site_runtime.adaptors.slurm.journal import SlurmJournal
from site_runtime.domain.slurm_arrays import TaskMapping
from site_runtime.domain.slurm_stages import STAGES

ARRAY_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS array_groups (
        group_id TEXT PRIMARY KEY,
        attempts TEXT NOT NULL,
        max_active INTEGER,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS array_stages (
        group_id TEXT NOT NULL REFERENCES array_groups(group_id),
        stage TEXT NOT NULL,
        state TEXT NOT NULL,
        job_id TEXT,
        request TEXT,
        refusal TEXT,
        updated_at REAL NOT NULL,
        PRIMARY KEY (group_id, stage)
    )""",
    """CREATE TABLE IF NOT EXISTS array_members (
        attempt_id TEXT PRIMARY KEY,
        group_id TEXT NOT NULL REFERENCES array_groups(group_id),
        task_index INTEGER NOT NULL
    )""",
)


class GroupConflict(ValueError):
    """A group id already saved with another mapping or ``max_active``."""

    code = "idempotency-conflict"


@dataclass(frozen=True)
class ArrayGroupRow:
    """One saved group: its mapping, ``max_active`` (None: no limit) and creation time."""

    group_id: str
    mapping: TaskMapping
    max_active: int | None
    created_at: float


@dataclass(frozen=True)
class ArrayStageRow:
    """One stage's array of a group, JSON columns decoded."""

    group_id: str
    stage: str
    state: str
    job_id: str | None
    request: dict[str, Any] | None
    refusal: dict[str, Any] | None


class ArrayJournal:
    """The group tables of ``journal``'s database (created when missing)."""

    def __init__(self, journal: SlurmJournal) -> None:
        self.journal = journal
        with journal.transaction() as db:
            for statement in ARRAY_SCHEMA:
                db.execute(statement)

    def create_group(
        self, group_id: str, mapping: TaskMapping, max_active: int | None
    ) -> ArrayGroupRow:
        """Save the group and its three ``prepared`` stages once; the same group again
        is returned as saved, another mapping under its id raises GroupConflict."""
        with self.journal.transaction() as db:
            row = db.execute(
                "SELECT attempts, max_active FROM array_groups WHERE group_id = ?", (group_id,)
            ).fetchone()
            if row is None:
                now = time.time()
                db.execute(
                    "INSERT INTO array_groups VALUES (?, ?, ?, ?)",
                    (group_id, json.dumps(list(mapping.attempts)), max_active, now),
                )
                for stage in STAGES:
                    db.execute(
                        "INSERT INTO array_stages (group_id, stage, state, updated_at)"
                        " VALUES (?, ?, 'prepared', ?)",
                        (group_id, stage, now),
                    )
                db.executemany(
                    "INSERT INTO array_members (attempt_id, group_id, task_index) VALUES (?, ?, ?)",
                    [(a, group_id, i) for a, i in mapping.indices().items()],
                )
            elif (tuple(json.loads(row[0])), row[1]) != (mapping.attempts, max_active):
                raise GroupConflict("the array group was saved with other Attempts")
        group = self.group(group_id)
        assert group is not None
        return group

    def group(self, group_id: str) -> ArrayGroupRow | None:
        """The saved group, None when unknown."""
        with self.journal.transaction() as db:
            row = db.execute(
                "SELECT attempts, max_active, created_at FROM array_groups WHERE group_id = ?",
                (group_id,),
            ).fetchone()
        if row is None:
            return None
        return ArrayGroupRow(group_id, TaskMapping(tuple(json.loads(row[0]))), row[1], row[2])

    def stages(self, group_id: str) -> dict[str, ArrayStageRow]:
        """The group's stages by name."""
        with self.journal.transaction() as db:
            rows = db.execute(
                "SELECT stage, state, job_id, request, refusal FROM array_stages"
                " WHERE group_id = ?",
                (group_id,),
            ).fetchall()
        return {
            r[0]: ArrayStageRow(
                group_id,
                r[0],
                r[1],
                r[2],
                json.loads(r[3]) if r[3] else None,
                json.loads(r[4]) if r[4] else None,
            )
            for r in rows
        }

    def update_stage(self, group_id: str, stage: str, **values: Any) -> None:
        """Update columns of one stage's array (``state``, ``job_id``, ``request``,
        ``refusal``); dicts are saved as JSON."""
        allowed = {"state", "job_id", "request", "refusal"}
        if not values or set(values) - allowed:
            raise ValueError("unknown array stage column")
        encoded = {
            k: json.dumps(v, sort_keys=True) if isinstance(v, dict) else v
            for k, v in values.items()
        }
        encoded["updated_at"] = time.time()
        columns = ", ".join(f"{name} = ?" for name in encoded)
        with self.journal.transaction() as db:
            db.execute(
                f"UPDATE array_stages SET {columns} WHERE group_id = ? AND stage = ?",
                (*encoded.values(), group_id, stage),
            )

    def member(self, attempt_id: str) -> tuple[str, int] | None:
        """``(group id, task index)`` of a child saved in a group, None otherwise."""
        with self.journal.transaction() as db:
            row = db.execute(
                "SELECT group_id, task_index FROM array_members WHERE attempt_id = ?",
                (attempt_id,),
            ).fetchone()
        return (row[0], row[1]) if row else None

    def assign_tasks(self, group_id: str, array_job_ids: dict[str, str]) -> None:
        """Give every child its task of each stage's array (module doc), atomically."""
        group = self.group(group_id)
        if group is None:
            raise KeyError(group_id)
        now = time.time()
        with self.journal.transaction() as db:
            for index, attempt_id in enumerate(group.mapping.attempts):
                db.executemany(
                    "UPDATE stages SET state = 'submitted', job_id = ?, updated_at = ?"
                    " WHERE attempt_id = ? AND stage = ? AND state = 'prepared'",
                    [(f"{array_job_ids[s]}_{index}", now, attempt_id, s) for s in STAGES],
                )
                db.execute(
                    "UPDATE attempts SET record = json_set(record, '$.array', json(?)),"
                    " updated_at = ? WHERE attempt_id = ?",
                    (json.dumps({"group_id": group_id, "index": index}), now, attempt_id),
                )
