"""What every part of the slurm executor shares (seed 000, Recovery).

:class:`ChainBase` holds the executor's collaborators (settings, journal,
slurmrestd access, member tokens, repository grants, execution authority, clock,
fault hook), one lock per Attempt, and the views built from the journal: saved
command results (replayed for the same command id), the native jobs of an
Attempt, the native facts saved for a stage and its non-terminal observations.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from site_runtime.adaptors.slurm_access import SlurmRest
from site_runtime.adaptors.slurm_edge import (
    ExecutionAuthority,
    MemberTokens,
    RepositoryGrant,
    RepositoryGrants,
)
from site_runtime.adaptors.slurm_job_model import STAGES, NativeJob
from site_runtime.adaptors.slurm_journal import AttemptRow, SlurmJournal
from site_runtime.adaptors.slurm_settings import SlurmSettings
from site_runtime.application.journaled import JournaledExecutor
from site_runtime.application.ports import CommandResult, SiteCommand


def now_iso(now: float) -> str:
    """``now`` (seconds since the epoch) as a UTC ISO 8601 string, e.g. ``2026-11-29T11:02:03Z``."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def native_facts(job: NativeJob) -> dict[str, Any]:
    """The journaled facts of a native job: state, terminal, exit_code, signal, reason, source."""
    return {
        "state": job.state,
        "terminal": job.terminal,
        "exit_code": job.exit_code,
        "signal": job.signal,
        "reason": job.reason,
        "source": job.source,
    }


class ChainBase:
    """The slurm executor's collaborators, per-Attempt locks and journal views."""

    def __init__(
        self,
        *,
        settings: SlurmSettings,
        journal: SlurmJournal,
        rest: SlurmRest,
        tokens: MemberTokens,
        grants: RepositoryGrants,
        authority: ExecutionAuthority | None = None,
        clock: Callable[[], float] = time.time,
        fault: Callable[[str], None] = lambda step: None,
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.rest = rest
        self.tokens = tokens
        self.grants = grants
        self.authority = authority
        self.clock = clock
        self.fault = fault
        self.commands = JournaledExecutor(
            journal,
            {
                "prepare": self._prepare,
                "start": self._start,
                "observe": self._observe,
                "cancel": self._cancel,
                "read-log": self._read_log,
            },
        )
        # Repository grants live only in memory, for the submission that uses them.
        self._grant_tokens: dict[tuple[str, str], RepositoryGrant] = {}

    def _attempt(self, attempt_id: str) -> AttemptRow:
        att = self.journal.attempt(attempt_id)
        assert att is not None
        return att

    def _save(self, command: SiteCommand, result: CommandResult) -> CommandResult:
        self.journal.save_result(
            command.command_id, command.attempt_id, command.kind, result.to_json()
        )
        return result

    def _native_jobs(self, attempt_id: str) -> list[dict[str, Any]]:
        stages = self.journal.stages(attempt_id)
        return [{"stage": s, "job_id": stages[s].job_id} for s in STAGES if stages[s].job_id]

    def _native_state(self, attempt_id: str) -> str | None:
        """The Slurm state of the chain's current job: the first submitted stage not
        yet terminal (``PENDING`` before its first facts), else the last one's state.
        The three jobs are submitted together, so the last job is PENDING while compute
        runs; reporting it made a running Run read "native PENDING" (a new user's
        report)."""
        stages = self.journal.stages(attempt_id)
        last = None
        for stage in STAGES:
            if not stages[stage].job_id:
                continue
            facts = stages[stage].native or {}
            last = facts.get("state") or "PENDING"
            if not facts.get("terminal"):
                return last
        return last

    def _observation(
        self, att: AttemptRow, phase: str, *, native_state: str | None = None
    ) -> dict[str, Any]:
        return {
            "phase": phase,
            "native_state": native_state,
            "exit_code": None,
            "signal": None,
            "failure": None,
            "output_commit": None,
            "endpoint": None,
            "observed_at": now_iso(self.clock()),
        }
