"""The terminal decision, bounded failure records and durable cleanup (seeds 000, 001, 003).

Once the chain has ended its terminal observation is saved (immutable evidence:
later observations replay it), then the Attempt's grants are released and its
workspace removed; cleanup is durable and retried until it is done.  A failure
record names the stage, scheduler state, job id, exit code, signal and a code;
never scheduler text or secrets.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

from site_runtime.adaptors.slurm_chain_base import now_iso
from site_runtime.adaptors.slurm_grants import ChainGrants
from site_runtime.adaptors.slurm_job_model import STAGES
from site_runtime.adaptors.slurm_journal import AttemptRow, StageRow
from site_runtime.adaptors.slurm_material import COMMIT
from site_runtime.adaptors.slurm_rendering import ChainRendering
from site_runtime.adaptors.slurm_scripts import EXIT_CODES, OUTPUT_COMMIT_MARK
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand

SCHEDULER_FAILURE_CODES = {
    "TIMEOUT": "wall-time-exceeded",
    "OUT_OF_MEMORY": "out-of-memory",
    "NODE_FAIL": "node-failure",
    "BOOT_FAIL": "node-failure",
    "DEADLINE": "scheduler-deadline",
    "PREEMPTED": "preempted",
}


def failure_record(
    stage: str,
    state: str | None,
    job_id: str | None,
    exit_code: int | None,
    signal: int | None,
    code: str | None,
) -> dict[str, Any]:
    """A bounded failure record: no scheduler text, no secrets (seed 001)."""
    return {
        "stage": stage,
        "scheduler_state": state,
        "job_id": job_id,
        "exit_code": exit_code,
        "signal": signal,
        "code": code,
    }


class ChainOutcome(ChainGrants, ChainRendering):
    """Decide and save the terminal observation, then clean up."""

    def _decide(self, att: AttemptRow, stages: dict[str, StageRow]) -> dict[str, Any] | None:
        """Save and return the terminal observation when the chain has ended, else None."""
        if att.outcome is not None:
            return att.outcome
        outcome = None
        for stage in STAGES:
            row = stages[stage]
            facts = row.native or {}
            if row.state == "refused":
                code = (row.refusal or {}).get("code")
                outcome = self._terminal(
                    att,
                    stages,
                    "failed",
                    failure=failure_record(stage, None, None, None, None, code),
                )
                break
            if facts.get("terminal") and facts.get("state") != "COMPLETED":
                if facts.get("state") == "CANCELLED":
                    outcome = self._terminal(att, stages, "cancelled", native_state="CANCELLED")
                else:
                    code = EXIT_CODES.get(
                        (stage, facts.get("exit_code"))
                    ) or SCHEDULER_FAILURE_CODES.get(facts.get("state"), "stage-failed")
                    outcome = self._terminal(
                        att,
                        stages,
                        "failed",
                        native_state=facts.get("state"),
                        failure=failure_record(
                            stage,
                            facts.get("state"),
                            row.job_id,
                            facts.get("exit_code"),
                            facts.get("signal"),
                            code,
                        ),
                    )
                break
        if outcome is None:
            out = stages["stage-out"].native or {}
            if out.get("terminal") and out.get("state") == "COMPLETED":
                outcome = self._terminal(
                    att,
                    stages,
                    "succeeded",
                    native_state="COMPLETED",
                    output_commit=self._output_commit(att.attempt_id),
                )
            elif (
                att.cancel_state is not None
                and not any(
                    r.job_id and not (r.native or {}).get("terminal") for r in stages.values()
                )
                and not any(r.state == "submitting" for r in stages.values())
            ):
                outcome = self._terminal(att, stages, "cancelled", native_state="CANCELLED")
        if outcome is None:
            return None
        self.journal.update_attempt(att.attempt_id, outcome=outcome, cleanup_state="pending")
        return outcome

    def _terminal(
        self,
        att: AttemptRow,
        stages: dict[str, StageRow],
        phase: str,
        *,
        native_state: str | None = None,
        failure: dict[str, Any] | None = None,
        output_commit: str | None = None,
    ) -> dict[str, Any]:
        compute = stages["compute"].native or {}
        return {
            "phase": phase,
            "native_state": native_state,
            "exit_code": compute.get("exit_code")
            if phase == "succeeded"
            else (failure or {}).get("exit_code"),
            "signal": (failure or {}).get("signal"),
            "failure": failure,
            "output_commit": output_commit,
            "endpoint": None,
            "observed_at": now_iso(self.clock()),
        }

    async def _finish(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        stages = self.journal.stages(att.attempt_id)
        outcome = self._decide(att, stages)
        att = self._attempt(att.attempt_id)
        if outcome is None:
            raise Deferred("slurm-observation-unavailable", "the chain has not ended yet")
        await self._cleanup(att)
        return CommandResult(
            command.command_id,
            "succeeded",
            native_jobs=self._native_jobs(att.attempt_id),
            observation=outcome,
        )

    async def _cleanup(self, att: AttemptRow) -> None:
        """Release grants and remove the workspace; durable and retried (seed 000)."""
        for stage in ("stage-in", "stage-out"):
            await self._release_grant(att.attempt_id, stage)
        pending = [
            s for s in self.journal.stages(att.attempt_id).values() if s.grant_state == "issued"
        ]
        ws = Path(self._workspace(att))
        try:
            info = os.lstat(ws)
        except FileNotFoundError:
            info = None
        except OSError:
            raise Deferred("workspace-unavailable", "the workspace cannot be inspected") from None
        if info is not None:
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                raise Deferred("workspace-unavailable", "the workspace is not a directory")
            try:
                shutil.rmtree(ws)
            except OSError:
                raise Deferred(
                    "workspace-unavailable", "the workspace cannot be removed now"
                ) from None
        if pending:
            raise Deferred("repository-unavailable", "a repository grant is not released yet")
        self.journal.update_attempt(att.attempt_id, cleanup_state="done")

    def _output_commit(self, attempt_id: str) -> str | None:
        try:
            with open(self._log_path(attempt_id, "stage-out"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 65536))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        found = None
        for line in text.splitlines():
            if line.startswith(OUTPUT_COMMIT_MARK):
                value = line[len(OUTPUT_COMMIT_MARK) :].strip()
                if COMMIT.match(value):
                    found = value
        return found
