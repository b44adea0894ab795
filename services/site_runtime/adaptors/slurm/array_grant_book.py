"""Every repository grant issued for an array task's staging stage, by id
(``jobs.sqlite``, table ``array_task_grants``; docs/site-runtime.md, Arrays).

The stage row of the child (``stages.grant_id``) names its *current* grant, the one in
the task's material file; this table adds when each grant was issued and when it
expires (the only facts about a grant the journal keeps — never its token), and keeps
the grants a renewal *superseded* until they are released:

``current`` → ``superseded`` (a renewal wrote its successor into the file) →
``released`` (revoked at the edge, or past its expiry).

A superseded grant may already be in a started task's environment, so it is never
revoked while the task may run: it is released when its stage has ended or at the
child's cleanup, or it expires by itself first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from site_runtime.adaptors.slurm.journal import SlurmJournal

GRANT_SCHEMA = """CREATE TABLE IF NOT EXISTS array_task_grants (
    grant_id TEXT PRIMARY KEY,
    attempt_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    state TEXT NOT NULL,
    issued_at REAL NOT NULL,
    expires_at REAL,
    updated_at REAL NOT NULL
)"""


@dataclass(frozen=True)
class TaskGrant:
    """One grant of a task's stage: its id, state, issue time and expiry (epoch s)."""

    grant_id: str
    attempt_id: str
    stage: str
    state: str
    issued_at: float
    expires_at: float | None


class ArrayGrantBook:
    """The ``array_task_grants`` table of ``journal``'s database (created when missing)."""

    def __init__(self, journal: SlurmJournal) -> None:
        self.journal = journal
        with journal.transaction() as db:
            db.execute(GRANT_SCHEMA)

    def issued(
        self, attempt_id: str, stage: str, grant_id: str, issued_at: float, expires_at: float | None
    ) -> None:
        """Save a grant written at the group's release as the stage's current one (an
        earlier current one was released by :class:`~.grants.StageGrants` first)."""
        now = time.time()
        with self.journal.transaction() as db:
            _make_current(db, "released", attempt_id, stage, grant_id, issued_at, expires_at, now)

    def renewed(
        self, attempt_id: str, stage: str, grant_id: str, issued_at: float, expires_at: float | None
    ) -> None:
        """Make ``grant_id`` the stage's current grant, its predecessor superseded, and
        name it on the child's stage row, in one transaction."""
        now = time.time()
        with self.journal.transaction() as db:
            _make_current(db, "superseded", attempt_id, stage, grant_id, issued_at, expires_at, now)
            db.execute(
                "UPDATE stages SET grant_state = 'issued', grant_id = ?, updated_at = ?"
                " WHERE attempt_id = ? AND stage = ?",
                (grant_id, now, attempt_id, stage),
            )

    def undo_renewal(self, attempt_id: str, stage: str, grant: TaskGrant) -> None:
        """The renewed grant never reached the file: ``grant`` (its predecessor) is the
        current one again and the newer one is released."""
        now = time.time()
        with self.journal.transaction() as db:
            db.execute(
                "UPDATE array_task_grants SET state = 'released', updated_at = ?"
                " WHERE attempt_id = ? AND stage = ? AND state = 'current'",
                (now, attempt_id, stage),
            )
            db.execute(
                "UPDATE array_task_grants SET state = 'current', updated_at = ? WHERE grant_id = ?",
                (now, grant.grant_id),
            )
            db.execute(
                "UPDATE stages SET grant_id = ?, updated_at = ? WHERE attempt_id = ? AND stage = ?",
                (grant.grant_id, now, attempt_id, stage),
            )

    def current(self, attempt_id: str, stage: str) -> TaskGrant | None:
        """The grant in the stage's material file now, None when none is recorded."""
        found = self._select(
            "attempt_id = ? AND stage = ? AND state = 'current'", attempt_id, stage
        )
        return found[0] if found else None

    def superseded(self, attempt_id: str, stage: str | None = None) -> list[TaskGrant]:
        """The Attempt's superseded grants not yet released (of ``stage``, or all)."""
        if stage is None:
            return self._select("attempt_id = ? AND state = 'superseded'", attempt_id)
        return self._select(
            "attempt_id = ? AND stage = ? AND state = 'superseded'", attempt_id, stage
        )

    def released(self, grant_id: str) -> None:
        """The grant is revoked (or expired): nothing is left to do for it."""
        with self.journal.transaction() as db:
            db.execute(
                "UPDATE array_task_grants SET state = 'released', updated_at = ? WHERE grant_id = ?",
                (time.time(), grant_id),
            )

    def _select(self, where: str, *args: str) -> list[TaskGrant]:
        with self.journal.transaction() as db:
            rows = db.execute(
                "SELECT grant_id, attempt_id, stage, state, issued_at, expires_at"
                f" FROM array_task_grants WHERE {where} ORDER BY issued_at",
                args,
            ).fetchall()
        return [TaskGrant(*row) for row in rows]


def _make_current(db, predecessor_state: str, attempt_id: str, stage: str, grant_id: str,
                  issued_at: float, expires_at: float | None, now: float) -> None:
    """Mark the stage's current grant ``predecessor_state`` and save ``grant_id`` as current."""
    db.execute(
        "UPDATE array_task_grants SET state = ?, updated_at = ?"
        " WHERE attempt_id = ? AND stage = ? AND state = 'current'",
        (predecessor_state, now, attempt_id, stage),
    )
    db.execute(
        "INSERT OR REPLACE INTO array_task_grants VALUES (?, ?, ?, 'current', ?, ?, ?)",
        (grant_id, attempt_id, stage, issued_at, expires_at, now),
    )
