"""Supervision of a local Attempt's stage processes (docs/site-runtime.md, Local
executor).

Each stage runs as a ``stage_runner`` process of its own. A launch records its
intent in ``jobs.sqlite`` before the process exists, and the runner's exclusive
claim file makes a second launch of a stage a no-op, so a restart never reruns a
finished stage and never starts a duplicate process. :meth:`StageSupervision.advance`
moves an Attempt from stage to stage as far as its runners allow; a runner gone
without a recorded status fails its stage with ``local-process-lost``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from site_runtime.adaptors.local.grant_releases import GrantReleases
from site_runtime.adaptors.local.jobs import AttemptRow, LocalJobsJournal, StageRow
from site_runtime.adaptors.local.processes import StageProcesses
from site_runtime.adaptors.local.settings import LocalSettings
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.ports import Deferred
from site_runtime.application.site_access import (
    RepositoryGrant,
    RepositoryGrants,
    release_stage_grant,
)
from site_runtime.domain.local_batch import LocalJob, parse_job

log = logging.getLogger("site_runtime.local")

NEXT_STAGE = {"stage-in": "compute", "compute": "stage-out", "stage-out": None}
DIRECTION = {"stage-in": "stage-in", "stage-out": "stage-out"}
TERMINAL = ("succeeded", "failed", "cancelled")
MAX_LAUNCHES = 2
_SERVICES_DIR = str(Path(__file__).resolve().parents[3])


def create_workspace(root: Path, attempt_id: str) -> Path:
    """The Attempt's private workspace ``root/<attempt id>`` with ``logs/`` and
    ``control/``, each mode 0700 (made now, or kept). Raises Deferred
    ``workspace-unavailable`` when it cannot be made."""
    workspace = root / attempt_id
    try:
        for path in (workspace, workspace / "logs", workspace / "control"):
            path.mkdir(mode=0o700, exist_ok=True)
            os.chmod(path, 0o700)
    except OSError:
        raise Deferred("workspace-unavailable", "the workspace cannot be created") from None
    return workspace


def control_directory(row: AttemptRow, stage: str) -> Path:
    """The runner control directory of ``stage`` (spec, claim, status, cancel)."""
    return row.workspace / "control" / stage


class StageSupervision:
    """Launch, poll and advance an Attempt's stages (see the module doc).

    ``set_state`` records an Attempt state change (the executor's, which also tells
    the edge of a terminal one); ``wake_socket`` names the socket runners report
    their end on, None without one.
    """

    def __init__(
        self,
        *,
        settings: LocalSettings,
        journal: LocalJobsJournal,
        processes: StageProcesses,
        grants: RepositoryGrants,
        releases: GrantReleases,
        set_state: Callable[[str, str], None],
        wake_socket: Callable[[], str | None],
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.processes = processes
        self.grants = grants
        self.releases = releases
        self.set_state = set_state
        self.wake_socket = wake_socket

    def fail_stage(self, attempt_id: str, stage: str, code: str) -> None:
        """Record ``stage`` failed with ``code`` and no exit facts (it never reported any)."""
        self.journal.finish_stage(
            attempt_id, stage, "failed", exit_code=None, signal=None, code=code, output_commit=None
        )

    @staticmethod
    def needs_grant(stage: str, job: LocalJob) -> bool:
        # Only an https repository is served by the edge's grants; a local one is read
        # (and pushed to) with the Runtime's own file permissions.
        return stage in DIRECTION and job.repository_url.startswith("https://")

    def _runner_spec(self, row: AttemptRow, stage: str, job: LocalJob) -> dict[str, Any]:
        workspace = row.workspace
        spec: dict[str, Any] = {
            "stage": stage,
            "repo_dir": str(workspace / "repo"),
            "log_file": str(workspace / "logs" / f"{stage}.log"),
            "repository": {"url": job.repository_url, "commit": job.commit, "branch": job.branch},
            "repository_ca_file": str(self.settings.repository_ca_file)
            if self.settings.repository_ca_file
            else None,
            "grace_seconds": self.settings.grace_seconds,
            "author": {"name": self.settings.author_name, "email": self.settings.author_email},
            "message": f"Metallo Run {row.run_id} Attempt {row.attempt_number} outputs",
            "wake_socket": self.wake_socket(),
            "wall_time_seconds": self.settings.staging_seconds,
            "working_directory": job.working_directory,
            "steps": [],
            "environment": {},
        }
        if stage == "compute":
            spec["wall_time_seconds"] = job.wall_time_seconds
            spec["steps"] = [s.to_argv() for s in job.steps]
            spec["environment"] = {
                "PATH": self.settings.base_path,
                "HOME": str(workspace),
                "LANG": "C.UTF-8",
                **job.environment,
                "METALLO_RUN_ID": row.run_id,
                "METALLO_ATTEMPT_ID": row.attempt_id,
                "METALLO_ATTEMPT_NUMBER": str(row.attempt_number),
                "METALLO_WORKSPACE": str(workspace / "repo"),
            }
        return spec

    async def launch(
        self, row: AttemptRow, stage: str, *, issued: RepositoryGrant | None = None
    ) -> None:
        """Launch ``stage``: intent → grant (staging; ``issued`` when the start's
        authorisation brought it) → runner process → pid saved.

        Raises Deferred (``repository-unavailable``) when the grant cannot be issued
        now, EdgeRefused when it is refused definitely.
        """
        current = self.journal.stage(row.attempt_id, stage)
        if current is None:
            current = self.journal.launch_intent(row.attempt_id, stage)
        if issued is not None:
            # Journal the grant before anything else can fail, so it is released with
            # the stage's grants instead of being left to expire.
            if current.grant_id and not current.grant_released:
                await self.release(row.attempt_id, stage, current.grant_id)
            self.journal.set_grant(row.attempt_id, stage, issued.grant_id)
            current = self.journal.stage(row.attempt_id, stage) or current
        control = control_directory(row, stage)
        control.mkdir(mode=0o700, parents=True, exist_ok=True)
        if (control / "claim").exists() or (control / "status.json").exists():
            if issued is not None:  # journaled above; not needed after all
                await self.release(row.attempt_id, stage, issued.grant_id)
            return  # a runner owns (or finished) this stage already
        job = parse_job(row.material)
        spec_file = control / "spec.json"
        spec_file.write_text(json.dumps(self._runner_spec(row, stage, job)))
        os.chmod(spec_file, 0o600)
        env = {
            "PATH": os.environ.get("PATH", self.settings.base_path),
            "LANG": "C.UTF-8",
            "PYTHONPATH": _SERVICES_DIR,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if self.needs_grant(stage, job):
            if issued is not None:
                grant = issued  # journaled above
            else:
                if current.grant_id and not current.grant_released:
                    await self.release(row.attempt_id, stage, current.grant_id)
                try:
                    grant = await self.grants.issue(row.attempt_id, DIRECTION[stage])
                except EdgeUnavailable as error:
                    raise Deferred("repository-unavailable", "no repository grant now") from error
                self.journal.set_grant(row.attempt_id, stage, grant.grant_id)
            env["METALLO_GIT_USERNAME"] = grant.username
            env["METALLO_GIT_TOKEN"] = grant.token
        self.journal.count_launch(row.attempt_id, stage)
        pid, ticks = self.processes.spawn(control, env, row.workspace / "logs" / f"{stage}.log")
        self.journal.running(row.attempt_id, stage, pid, ticks)
        log.info("attempt %s: %s launched (pid %s)", row.attempt_id, stage, pid)

    def finish_from_status(self, row: AttemptRow, stage: str, status: dict[str, Any]) -> None:
        code = status.get("code")
        exit_code = status.get("exit_code")
        state = (
            "succeeded"
            if exit_code == 0 and not code
            else ("cancelled" if code == "cancelled" else "failed")
        )
        self.journal.finish_stage(
            row.attempt_id,
            stage,
            state,
            exit_code=exit_code,
            signal=status.get("signal"),
            code=code,
            output_commit=status.get("output_commit"),
        )

    async def _poll(self, row: AttemptRow, stage_row: StageRow) -> None:
        """Bring a launching/running stage's journal row up to date with its runner."""
        control = control_directory(row, stage_row.stage)
        status = self.processes.status(control)
        if status is not None:
            self.finish_from_status(row, stage_row.stage, status)
            return
        claim = self.processes.claim(control)
        if claim is not None:
            pid, ticks = claim
            if (pid, ticks) != (stage_row.pid, stage_row.start_ticks):
                self.journal.running(row.attempt_id, stage_row.stage, pid, ticks)  # re-adopted
            if self.processes.alive(pid, ticks):
                return
            status = self.processes.status(control)  # it may have finished between the two reads
            if status is not None:
                self.finish_from_status(row, stage_row.stage, status)
                return
            # Its step may still run (the runner was killed, not the step): stop it, or
            # it would go on unseen after the stage is recorded as failed.
            orphan = self.processes.kill_orphaned_step(control, pid)
            log.error(
                "attempt %s: %s process %s ended without recording its exit%s",
                row.attempt_id,
                stage_row.stage,
                pid,
                "; its step's process group was killed" if orphan else "",
            )
            self.fail_stage(row.attempt_id, stage_row.stage, "local-process-lost")
            return
        if self.processes.alive(stage_row.pid, stage_row.start_ticks):
            return  # launched, not yet claimed
        if stage_row.launches == 0 or (
            stage_row.launches < MAX_LAUNCHES and self._launch_timed_out(stage_row)
        ):
            await self.launch(row, stage_row.stage)  # never ran: safe (claim file)
            return
        if stage_row.launches >= MAX_LAUNCHES or self._launch_timed_out(stage_row):
            self.fail_stage(row.attempt_id, stage_row.stage, "local-process-lost")

    def _launch_timed_out(self, stage_row: StageRow) -> bool:
        if stage_row.launched_at is None:
            return True
        launched = datetime.strptime(stage_row.launched_at, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=UTC
        )
        return (
            datetime.now(UTC) - launched
        ).total_seconds() >= self.settings.launch_timeout_seconds

    async def advance(self, row: AttemptRow, *, raise_deferrals: bool) -> None:
        """Move the Attempt forward as far as its stage processes allow."""
        while row.state in NEXT_STAGE:
            stage_row = self.journal.stage(row.attempt_id, row.state)
            try:
                if stage_row is None:
                    await self.launch(row, row.state)
                    return
                if stage_row.state in ("launching", "running"):
                    await self._poll(row, stage_row)
            except Deferred:
                if raise_deferrals:
                    raise
                return
            except EdgeRefused as error:
                log.error(
                    "attempt %s: repository grant for %s refused (%s)",
                    row.attempt_id,
                    row.state,
                    error.code,
                )
                self.fail_stage(row.attempt_id, row.state, "authorisation-refused")
            stage_row = self.journal.stage(row.attempt_id, row.state)
            assert stage_row is not None
            if stage_row.state in ("launching", "running"):
                return
            await self.release_grants(row.attempt_id)
            if stage_row.state != "succeeded":
                final = "cancelled" if stage_row.state == "cancelled" else "failed"
                self.set_state(row.attempt_id, final)
                log.info(
                    "attempt %s: %s %s (%s)", row.attempt_id, stage_row.stage, final, stage_row.code
                )
                return
            following = NEXT_STAGE[row.state]
            if following is None:
                self.set_state(row.attempt_id, "succeeded")
                log.info("attempt %s: succeeded", row.attempt_id)
                return
            if row.cancel_result is not None:
                return
            if following == "compute" and parse_job(row.material).deadline_passed(
                datetime.now(UTC)
            ):
                # The deadline refuses compute not yet launched; the Attempt fails.
                self.journal.launch_intent(row.attempt_id, following)
                self.fail_stage(row.attempt_id, following, "attempt-deadline-passed")
                self.set_state(row.attempt_id, "failed")
                return
            self.journal.launch_intent(row.attempt_id, following)
            row = self.journal.attempt(row.attempt_id)
            assert row is not None

    async def release(self, attempt_id: str, stage: str, grant_id: str) -> bool:
        """Revoke the stage's grant now (False: kept for the next pass)."""
        return await release_stage_grant(
            self.grants, self.journal, attempt_id, stage, grant_id, log
        )

    async def release_grants(self, attempt_id: str) -> None:
        """The Attempt's ended stages' grants are recorded unreleased in the journal;
        the supervision pass releases them with any others within
        ``release_delay_seconds`` (one request for many, :class:`GrantReleases`)."""
        self.releases.schedule()
