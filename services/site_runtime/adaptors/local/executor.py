"""The local ``queued-batch`` executor: the embedded default (DESIGN.md, Site Runtime).

Each Attempt gets a private workspace (mode 0700) under the configured root::

    <root>/<attempt_id>/repo/             the checkout (stage-in → compute → stage-out)
    <root>/<attempt_id>/logs/<stage>.log  the Attempt-scoped stage logs
    <root>/<attempt_id>/control/<stage>/  runner control files (spec, claim, status)

Stages run as ordinary local processes through ``stage_runner`` (one runner per
stage, in its own session), so they survive a Runtime restart. ``jobs.sqlite``
(``local_jobs.py``) records every launch intent before the process exists, and the
runner's exclusive claim file makes a second launch of a stage a no-op: a restart
never reruns a finished phase and never starts a duplicate process (seed 000,
Recovery). A runner still alive after a restart is re-adopted by pid + start time;
one gone without a recorded status marks its stage failed with
``local-process-lost``.

Phases of ``observe`` (docs/site-commands.md): ``prepared`` → ``queued`` (stage-in)
→ ``running`` (compute and stage-out) → ``succeeded`` / ``failed`` / ``cancelled``.
Once a terminal one is committed (:meth:`LocalExecutor._set_state`), the optional
``on_native_end`` tells the Site edge in the background (a hint, ADR 0016).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from site_runtime.adaptors.local.grant_releases import GrantReleases
from site_runtime.adaptors.local.jobs import AttemptRow, LocalJobsJournal, StageRow, now_iso
from site_runtime.adaptors.local.processes import StageProcesses
from site_runtime.adaptors.local.stage_wakeups import StageWakeups
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.journaled import JournaledExecutor
from site_runtime.application.log_reads import ReadPermits, permitted_read, read_span
from site_runtime.application.native_ends import NativeEndNotices
from site_runtime.application.ports import CommandResult, Deferred, NativeEndNotice, SiteCommand
from site_runtime.application.site_access import (
    ExecutionAuthority,
    RepositoryGrant,
    RepositoryGrants,
)
from site_runtime.domain.local_batch import (
    InvalidMaterial,
    LocalJob,
    native_jobs,
    observation,
    parse_job,
)

log = logging.getLogger("site_runtime.local")

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
NEXT_STAGE = {"stage-in": "compute", "compute": "stage-out", "stage-out": None}
DIRECTION = {"stage-in": "stage-in", "stage-out": "stage-out"}
TERMINAL = ("succeeded", "failed", "cancelled")
MAX_LOG_BYTES = 5 * 1024 * 1024
MAX_LAUNCHES = 2
MIN_PASS_SECONDS = 0.02  # woken supervision passes start at least this far apart
STOP_RELEASE_SECONDS = 5.0  # at most this long for the releases a graceful stop sends
_SERVICES_DIR = str(Path(__file__).resolve().parents[3])


@dataclass(frozen=True)
class LocalSettings:
    """Settings of the local executor (units: seconds).

    ``grace_seconds``: TERM → KILL delay for wall time and cancellation;
    ``staging_seconds``: time limit of stage-in and stage-out each;
    ``max_wall_seconds``: the Site's compute limit (None: no limit);
    ``max_active``: Attempts in stage-in/compute/stage-out at once; a start beyond it is
    accepted and the Attempt ``waiting`` until a slot frees (first come, first served);
    ``launch_timeout_seconds``: a launched runner that has not claimed its stage after
    this long is launched once more (the claim file prevents a second effect);
    ``release_delay_seconds``: an ended stage's repository grant is released within
    this long, together with the others ended meanwhile (:mod:`.grant_releases`);
    ``notice_timeout_seconds``: bound of one native-end notice to the edge (ADR 0016).
    """

    workspace_root: Path
    grace_seconds: float = 10.0
    staging_seconds: int = 600
    max_wall_seconds: int | None = None
    max_active: int = 4
    repository_ca_file: Path | None = None
    author_name: str = "Metallo"
    author_email: str = "metallo@localhost"
    poll_seconds: float = 0.5
    launch_timeout_seconds: float = 10.0
    release_delay_seconds: float = 1.0
    base_path: str = "/usr/local/bin:/usr/bin:/bin"
    notice_timeout_seconds: float = 5.0


class LocalExecutor:
    """``QueuedBatchExecutor`` on local processes (see module doc)."""

    def __init__(
        self,
        settings: LocalSettings,
        journal: LocalJobsJournal,
        authority: ExecutionAuthority,
        grants: RepositoryGrants,
        permits: ReadPermits | None = None,
        on_native_end: NativeEndNotice | None = None,
    ) -> None:
        """``on_native_end`` (e.g. ``EdgeClient.notice_native_end``) is called in the
        background, once per Attempt, after an Attempt's terminal state is committed
        to ``jobs.sqlite`` (best effort, ADR 0016; :mod:`site_runtime.application.native_ends`)."""
        self.settings = settings
        self.journal = journal
        self.authority = authority
        self._grants = grants
        # Read permits come from the same Site edge as execution authority by default.
        self.permits = permits or (authority if isinstance(authority, ReadPermits) else None)
        self.commands = JournaledExecutor(
            journal,
            {
                "prepare": self._prepare,
                "start": self._start,
                "observe": self._observe,
                "cancel": self._cancel,
                "read-log": self._read_log,
            },
            unlocked=("observe",),  # it starts waiting Attempts, which takes their locks
        )
        self.processes = StageProcesses()
        self._task: asyncio.Task | None = None
        self._wakeups: StageWakeups | None = None
        self._edge_combines_grants = True  # False after an older edge refused the field
        self.releases = GrantReleases(
            journal, grants, delay_seconds=settings.release_delay_seconds
        )
        self.native_ends = NativeEndNotices(
            on_native_end, timeout_seconds=settings.notice_timeout_seconds
        )
        Path(settings.workspace_root).mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def grants(self) -> RepositoryGrants:
        """The repository-grants port (replacing it also replaces the releases')."""
        return self._grants

    @grants.setter
    def grants(self, value: RepositoryGrants) -> None:
        self._grants = value
        self.releases.grants = value

    def _lock(self, attempt_id: str) -> asyncio.Lock:
        return self.commands.lock(attempt_id)

    def _set_state(self, attempt_id: str, state: str, cancel_result: str | None = None) -> None:
        """Every change of an Attempt's journal state goes through here: once a
        terminal state (one ``observe`` reports as ended) is committed, the edge is told
        in the background (a hint; the observe it brings is the evidence, ADR 0016)."""
        self.journal.set_state(attempt_id, state, cancel_result=cancel_result)
        if state in TERMINAL:
            self.native_ends.notice(attempt_id)

    # ================================================================ background
    async def start_supervision(self) -> None:
        """Advance active Attempts (stage-in done → compute launched, …) so progress does
        not wait for an observe: at once when a runner reports its end on the wake socket
        (``<workspace_root>/wake.sock``, ADR 0012), at the latest every ``poll_seconds``."""
        if self._task is None:
            self.releases.schedule()  # grants a previous run left unreleased
            if self._wakeups is None:
                self._wakeups = StageWakeups(Path(self.settings.workspace_root) / "wake.sock")
            self._task = asyncio.create_task(self._supervise())

    def close(self) -> None:
        """End the stage launcher and the wake socket (running stages keep running; a
        restart adopts them)."""
        if self._wakeups is not None:
            self._wakeups.close()
            self._wakeups = None
        self.native_ends.cancel()
        self.processes.close()

    async def stop_supervision(self) -> None:
        """Stop advancing (running stage processes are left running, by design) and send
        the releases still waiting, so a graceful stop leaves no ended stage's grant live."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        # Best effort within a few seconds: a stop must not hang on an unreachable edge
        # (what stays unreleased is in the journal for the next start).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.releases.flush(), STOP_RELEASE_SECONDS)
        await self.native_ends.close()  # hints still in flight are dropped

    def _has_slot(self) -> bool:
        """Whether fewer than ``max_active`` Attempts are in a stage now."""
        return len(self.journal.active_attempts()) < self.settings.max_active

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await self.tick()
            if self._wakeups is None:
                await asyncio.sleep(self.settings.poll_seconds)
            elif await self._wakeups.wait(self.settings.poll_seconds):
                # Wake-ups come from anything running as the Runtime's user (a compute
                # step too): at most one pass per MIN_PASS_SECONDS, however many arrive.
                await asyncio.sleep(max(0.0, MIN_PASS_SECONDS - (loop.time() - began)))

    async def tick(self) -> None:
        """One supervision pass over every active Attempt (errors are logged, not raised)."""
        self.processes.reap()
        for attempt_id in self.journal.active_attempts():
            try:
                async with self._lock(attempt_id):
                    row = self.journal.attempt(attempt_id)
                    if row is not None:
                        await self._advance(row, raise_deferrals=False)
            except Exception as error:  # noqa: BLE001 - one Attempt must not stop the others
                log.error(
                    "attempt %s: runtime-error while advancing (%s)",
                    attempt_id,
                    type(error).__name__,
                )
        try:
            await self.start_waiting()
        except Exception as error:  # noqa: BLE001 - the pass must go on (a reviewer saw it die)
            log.error("runtime-error while starting waiting Attempts (%s)", type(error).__name__)
        await self._flush_releases()

    async def start_waiting(self) -> None:
        """Launch stage-in of ``waiting`` Attempts, oldest first, while slots are free.

        A waiting Attempt's start was answered already, so what stops it now is a
        failure of the Attempt, not a refusal: its deadline passed
        (``attempt-deadline-passed``, seed 000: expiry refuses stage-in not yet
        submitted) or authority refused it now (``authorisation-refused``). An edge that
        cannot answer leaves it waiting for the next pass. Attempts whose deadline passed
        fail at once, slot or no slot (one must not wait for ever on a full Runtime)."""
        now = datetime.now(UTC)
        waiting = self.journal.waiting_attempts()
        for attempt_id in waiting:
            row = self.journal.attempt(attempt_id)
            if row is not None and parse_job(row.material).deadline_passed(now):
                async with self._lock(attempt_id):
                    row = self.journal.attempt(attempt_id)
                    if row is not None and row.state == "waiting" and row.cancel_result is None:
                        log.info("attempt %s: its deadline passed while it waited", attempt_id)
                        self._fail_before_stage_in(row, "attempt-deadline-passed")
        for attempt_id in waiting:
            if not self._has_slot():
                return
            async with self._lock(attempt_id):
                row = self.journal.attempt(attempt_id)
                if row is None or row.state != "waiting" or row.cancel_result is not None:
                    continue
                try:
                    refusal = await self._begin(row)
                except (Deferred, EdgeUnavailable) as error:
                    log.info("attempt %s: still waiting (%s)", attempt_id, type(error).__name__)
                    return
                except Exception as error:  # noqa: BLE001 - one Attempt must not stop the others
                    log.error("attempt %s: runtime-error while starting (%s)", attempt_id,
                              type(error).__name__)
                    continue
                if refusal is not None:
                    code, message = refusal
                    log.info("attempt %s: not started after waiting: %s", attempt_id, message)
                    self._fail_before_stage_in(row, code)
                    continue
                row = self.journal.attempt(attempt_id)
                if row is not None and row.state not in TERMINAL:
                    await self._advance(row, raise_deferrals=False)

    def _fail_before_stage_in(self, row: AttemptRow, code: str) -> None:
        """The Attempt fails before stage-in runs, with ``code`` in its failure record."""
        if self.journal.stage(row.attempt_id, "stage-in") is None:
            self.journal.launch_intent(row.attempt_id, "stage-in")
        self.journal.finish_stage(
            row.attempt_id,
            "stage-in",
            "failed",
            exit_code=None,
            signal=None,
            code=code,
            output_commit=None,
        )
        self._set_state(row.attempt_id, "failed")

    async def _begin(self, row: AttemptRow) -> tuple[str, str] | None:
        """Check the deadline, authorise again (with the stage-in grant when the edge
        combines them) and launch stage-in. Returns None once launched, else the
        (code, message) that stopped it; a refused stage-in grant fails the Attempt
        here and returns ``authorisation-refused``. Raises Deferred when the edge
        cannot answer now."""
        job = parse_job(row.material)
        if job.deadline_passed(datetime.now(UTC)):
            return (
                "attempt-deadline-passed",
                "the Attempt's deadline has passed; nothing was started",
            )
        issued: RepositoryGrant | None = None
        try:
            if (
                self._needs_grant("stage-in", job)
                and self._edge_combines_grants
                and hasattr(self.authority, "authorise_with_grant")
            ):
                # One round trip: the decision and the stage-in grant together.
                refused, issued = await self._authorise_with_grant(row, job)
            else:
                refused = await self._authorise(row.run_id, row.attempt_id, job)
            if refused is not None:
                return "authorisation-refused", refused
            await self._launch(row, "stage-in", issued=issued)
        except EdgeRefused as error:
            self._fail_before_stage_in(row, "authorisation-refused")
            return "authorisation-refused", f"repository grant refused: {error.code}"
        return None

    # ================================================================ commands
    async def prepare(self, command: SiteCommand) -> CommandResult:
        """Check the material, authorise it at the edge, create the private workspace and
        save the Attempt as ``prepared``. Refusals: ``invalid-material``,
        ``unsupported-local-inputs``, ``local-wall-time-above-limit``, ``material-changed``,
        ``authorisation-refused``. Deferrals: ``authority-unavailable``,
        ``workspace-unavailable``."""
        return await self.commands.run("prepare", command)

    async def _prepare(self, command: SiteCommand) -> CommandResult:
        try:
            if not _ID.match(command.attempt_id) or not _ID.match(command.run_id):
                raise InvalidMaterial("invalid-material", "malformed run or attempt id")
            if command.payload.get("family", "queued-batch") != "queued-batch":
                raise InvalidMaterial(
                    "invalid-material", "the local executor runs queued-batch actions only"
                )
            job = parse_job(command.payload, self.settings.max_wall_seconds)
        except InvalidMaterial as refusal:
            return self._save(command, "refused", code=refusal.code, message=str(refusal))
        existing = self.journal.attempt(command.attempt_id)
        if existing is not None and existing.material != command.payload:
            return self._save(
                command,
                "refused",
                code="material-changed",
                message="the Attempt was prepared with other material",
            )
        refused = await self._authorise(command.run_id, command.attempt_id, job)
        if refused is not None:
            return self._save(command, "refused", code="authorisation-refused", message=refused)
        workspace = Path(self.settings.workspace_root) / command.attempt_id
        try:
            for path in (workspace, workspace / "logs", workspace / "control"):
                path.mkdir(mode=0o700, exist_ok=True)
                os.chmod(path, 0o700)
        except OSError:
            raise Deferred("workspace-unavailable", "the workspace cannot be created") from None
        row = self.journal.insert_attempt(
            command.attempt_id,
            command.run_id,
            command.attempt_number,
            command.payload,
            workspace,
        )
        return self._save(command, "succeeded", row=row)

    async def start(self, command: SiteCommand) -> CommandResult:
        """Authorise again and launch stage-in (a repository grant is issued for it) — or,
        when ``max_active`` Attempts are in a stage (or others wait already), accept the
        start and leave the Attempt ``waiting`` (observed as ``queued``/``PENDING``) for
        :meth:`start_waiting`. Refusals: ``attempt-not-prepared``,
        ``attempt-deadline-passed``, ``authorisation-refused``. Deferrals:
        ``authority-unavailable``, ``repository-unavailable``."""
        return await self.commands.run("start", command)

    async def _start(self, command: SiteCommand) -> CommandResult:
        row = self.journal.attempt(command.attempt_id)
        assert row is not None
        if row.state == "prepared":
            if not self._has_slot() or self.journal.waiting_attempts():
                # Accepted now, launched when a slot frees (start_waiting): a
                # deferral here would hold the Site's whole ordered stream — every
                # other Run's observe, cancel and log read — behind this start.
                if parse_job(row.material).deadline_passed(datetime.now(UTC)):
                    return self._save(
                        command,
                        "refused",
                        code="attempt-deadline-passed",
                        message="the Attempt's deadline has passed; nothing was started",
                    )
                self._set_state(row.attempt_id, "waiting")
                log.info("attempt %s: waiting for a free slot", row.attempt_id)
                return self._save(command, "succeeded", row=self.journal.attempt(row.attempt_id))
            refusal = await self._begin(row)
            if refusal is not None:
                code, message = refusal
                return self._save(command, "refused", code=code, message=message)
        row = self.journal.attempt(command.attempt_id)
        assert row is not None
        if row.state not in TERMINAL:
            await self._advance(row, raise_deferrals=True)
        return self._save(command, "succeeded", row=self.journal.attempt(row.attempt_id))

    async def observe(self, command: SiteCommand) -> CommandResult:
        """Advance the Attempt from its stage processes and report its phase."""
        return await self.commands.run("observe", command)

    async def _observe(self, command: SiteCommand) -> CommandResult:
        async with self._lock(command.attempt_id):
            row = self.journal.attempt(command.attempt_id)
            assert row is not None
            waiting = row.state == "waiting"
            if row.state not in TERMINAL and row.state not in ("prepared", "waiting"):
                await self._advance(row, raise_deferrals=False)
        if waiting:
            await self.start_waiting()  # a Runtime without a supervision pass still starts it
        async with self._lock(command.attempt_id):
            result = self._result(command, "succeeded", row=self.journal.attempt(row.attempt_id))
        # Due releases go now too (a Runtime without a supervision pass still releases).
        await self._flush_releases()
        return result

    async def cancel(self, command: SiteCommand) -> CommandResult:
        """Stop the Attempt: TERM the running stage's process group, KILL it after the
        grace period, record ``cancelled`` and never launch a later stage. The exact
        result (message ``accepted``, ``already-terminal`` or ``not-found``) is saved
        and replayed."""
        return await self.commands.run("cancel", command)

    async def _cancel(self, command: SiteCommand) -> CommandResult:
        row = self.journal.attempt(command.attempt_id)
        if row is None:
            return self._save(command, "succeeded", message="not-found")
        if row.state in TERMINAL:
            await self._release_grants(row.attempt_id)
            # A cancellation accepted before a restart keeps its answer.
            answer = "accepted" if row.cancel_result else "already-terminal"
            return self._save(command, "succeeded", message=answer, row=row)
        # The intent first: a restart during the kill finishes the cancellation.
        self._set_state(row.attempt_id, row.state, cancel_result="accepted")
        await self._stop_stage(row)
        row = self.journal.attempt(row.attempt_id)
        assert row is not None
        if row.state not in TERMINAL:
            self._set_state(row.attempt_id, "cancelled")
        await self._release_grants(row.attempt_id)
        return self._save(
            command, "succeeded", message="accepted", row=self.journal.attempt(row.attempt_id)
        )

    async def recover(self, command: SiteCommand) -> CommandResult:
        """Finish a command dispatched before a restart: every method here is idempotent
        by the journal (saved results, launch intents, claim files), so the command is
        simply handled again; a cancellation whose intent was saved completes."""
        return await self.commands.recover(command)

    async def read_log(self, command: SiteCommand) -> CommandResult:
        """The tail of one stage's Attempt-scoped log (or, with ``offset``, the log from
        that byte on), read only under the viewer's read permit
        (``application/log_reads.py``: permit, confirm, read, confirm; ten seconds at
        most): at most ``max_bytes`` (≤ 5 MiB) as ``observation.log`` ``{stage, text,
        truncated, offset, next_offset, size}``, also while the Attempt runs.
        Refusals: ``unknown-stage``,
        ``attempt-not-prepared`` and those of :func:`permitted_read`. It takes no
        Attempt lock, so a read never waits behind an Attempt being advanced."""
        return await self.commands.run("read-log", command)

    async def _read_log(self, command: SiteCommand) -> CommandResult:
        stage = command.payload.get("stage", "compute")
        if stage not in NEXT_STAGE:
            return CommandResult(command.command_id, "refused", "unknown-stage", "no such stage")
        row = self.journal.attempt(command.attempt_id)
        assert row is not None
        logs = row.workspace / "logs"

        async def read(name: str, max_bytes: int, offset: int | None) -> tuple[bytes, int, int]:
            return await asyncio.to_thread(read_span, logs / f"{name}.log", max_bytes, offset)

        try:
            return await permitted_read(command, self.permits, read)
        except OSError:
            return CommandResult(
                command.command_id, "refused", "workspace-unavailable", "the log cannot be read"
            )

    # ================================================================ internals
    def _result(
        self,
        command: SiteCommand,
        outcome: str,
        *,
        code: str | None = None,
        message: str | None = None,
        row: AttemptRow | None = None,
    ) -> CommandResult:
        stages = [s.facts() for s in self.journal.stages(row.attempt_id)] if row else []
        return CommandResult(
            command.command_id,
            outcome,
            code,
            message,
            native_jobs=native_jobs(stages),
            observation=observation(row.state, stages, now_iso()) if row else None,
        )

    def _save(self, command: SiteCommand, outcome: str, **kwargs: Any) -> CommandResult:
        result = self._result(command, outcome, **kwargs)
        return CommandResult(**self.journal.save_result(command.command_id, result.to_json()))

    @staticmethod
    def _authorisation(run_id: str, attempt_id: str, job: LocalJob) -> dict[str, str]:
        return {
            "run_id": run_id,
            "attempt_id": attempt_id,
            "material_digest": job.material_digest,
            "member_id": job.member.get("id", ""),
            "site_username": job.member.get("site_username", ""),
            "account": job.member.get("account", ""),
        }

    async def _authorise(self, run_id: str, attempt_id: str, job: LocalJob) -> str | None:
        """None when the edge authorises the execution now; the refusal text otherwise.
        Raises Deferred ``authority-unavailable``."""
        try:
            await self.authority.authorise_execution(self._authorisation(run_id, attempt_id, job))
        except EdgeUnavailable as error:
            raise Deferred("authority-unavailable", "authorisation cannot be confirmed") from error
        except EdgeRefused as error:
            return f"{error.code}: {error.reason or 'refused'}"
        return None

    async def _authorise_with_grant(
        self, row: AttemptRow, job: LocalJob
    ) -> tuple[str | None, RepositoryGrant | None]:
        """(None, stage-in grant) when the edge authorises the execution now, (refusal
        text, None) when it refuses the decision; an edge without the combined request
        gets the plain authorisation, (refusal or None, None). Raises Deferred
        ``authority-unavailable`` and EdgeRefused when only the grant is refused."""
        request = self._authorisation(row.run_id, row.attempt_id, job)
        try:
            _, grant = await self.authority.authorise_with_grant(request, "stage-in")
        except EdgeUnavailable as error:
            raise Deferred("authority-unavailable", "authorisation cannot be confirmed") from error
        except EdgeRefused as error:
            if error.status == 422:
                # An edge older than the optional field refuses it as invalid: use two
                # requests from now on (a reviewer's version-skew test).
                log.warning("the Site edge does not combine grants with authorisations")
                self._edge_combines_grants = False
                return await self._authorise(row.run_id, row.attempt_id, job), None
            if error.code != "authorisation-refused":
                raise
            return f"{error.code}: {error.reason or 'refused'}", None
        return None, grant

    @staticmethod
    def _needs_grant(stage: str, job: LocalJob) -> bool:
        # Only an https repository is served by the edge's grants; a local one is read
        # (and pushed to) with the Runtime's own file permissions.
        return stage in DIRECTION and job.repository_url.startswith("https://")

    def _control(self, row: AttemptRow, stage: str) -> Path:
        return row.workspace / "control" / stage

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
            "wake_socket": self._wakeups.path if self._wakeups is not None else None,
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

    async def _launch(
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
            # the stage's grants (a reviewer found it left to expire otherwise).
            if current.grant_id and not current.grant_released:
                await self._release(row.attempt_id, stage, current.grant_id)
            self.journal.set_grant(row.attempt_id, stage, issued.grant_id)
            current = self.journal.stage(row.attempt_id, stage) or current
        control = self._control(row, stage)
        control.mkdir(mode=0o700, parents=True, exist_ok=True)
        if (control / "claim").exists() or (control / "status.json").exists():
            if issued is not None:  # journaled above; not needed after all
                await self._release(row.attempt_id, stage, issued.grant_id)
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
        if self._needs_grant(stage, job):
            if issued is not None:
                grant = issued  # journaled above
            else:
                if current.grant_id and not current.grant_released:
                    await self._release(row.attempt_id, stage, current.grant_id)
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

    def _finish_from_status(self, row: AttemptRow, stage: str, status: dict[str, Any]) -> None:
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
        control = self._control(row, stage_row.stage)
        status = self.processes.status(control)
        if status is not None:
            self._finish_from_status(row, stage_row.stage, status)
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
                self._finish_from_status(row, stage_row.stage, status)
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
            self.journal.finish_stage(
                row.attempt_id,
                stage_row.stage,
                "failed",
                exit_code=None,
                signal=None,
                code="local-process-lost",
                output_commit=None,
            )
            return
        if self.processes.alive(stage_row.pid, stage_row.start_ticks):
            return  # launched, not yet claimed
        if stage_row.launches == 0 or (
            stage_row.launches < MAX_LAUNCHES and self._launch_timed_out(stage_row)
        ):
            await self._launch(row, stage_row.stage)  # never ran: safe (claim file)
            return
        if stage_row.launches >= MAX_LAUNCHES or self._launch_timed_out(stage_row):
            self.journal.finish_stage(
                row.attempt_id,
                stage_row.stage,
                "failed",
                exit_code=None,
                signal=None,
                code="local-process-lost",
                output_commit=None,
            )

    def _launch_timed_out(self, stage_row: StageRow) -> bool:
        if stage_row.launched_at is None:
            return True
        launched = datetime.strptime(stage_row.launched_at, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=UTC
        )
        return (
            datetime.now(UTC) - launched
        ).total_seconds() >= self.settings.launch_timeout_seconds

    async def _advance(self, row: AttemptRow, *, raise_deferrals: bool) -> None:
        """Move the Attempt forward as far as its stage processes allow."""
        while row.state in NEXT_STAGE:
            stage_row = self.journal.stage(row.attempt_id, row.state)
            try:
                if stage_row is None:
                    await self._launch(row, row.state)
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
                self.journal.finish_stage(
                    row.attempt_id,
                    row.state,
                    "failed",
                    exit_code=None,
                    signal=None,
                    code="authorisation-refused",
                    output_commit=None,
                )
            stage_row = self.journal.stage(row.attempt_id, row.state)
            assert stage_row is not None
            if stage_row.state in ("launching", "running"):
                return
            await self._release_grants(row.attempt_id)
            if stage_row.state != "succeeded":
                final = "cancelled" if stage_row.state == "cancelled" else "failed"
                self._set_state(row.attempt_id, final)
                log.info(
                    "attempt %s: %s %s (%s)", row.attempt_id, stage_row.stage, final, stage_row.code
                )
                return
            following = NEXT_STAGE[row.state]
            if following is None:
                self._set_state(row.attempt_id, "succeeded")
                log.info("attempt %s: succeeded", row.attempt_id)
                return
            if row.cancel_result is not None:
                return
            if following == "compute" and parse_job(row.material).deadline_passed(
                datetime.now(UTC)
            ):
                # Seed 000: expiry refuses compute not yet submitted; the Attempt fails.
                self.journal.launch_intent(row.attempt_id, following)
                self.journal.finish_stage(
                    row.attempt_id,
                    following,
                    "failed",
                    exit_code=None,
                    signal=None,
                    code="attempt-deadline-passed",
                    output_commit=None,
                )
                self._set_state(row.attempt_id, "failed")
                return
            self.journal.launch_intent(row.attempt_id, following)
            row = self.journal.attempt(row.attempt_id)
            assert row is not None

    async def _release(self, attempt_id: str, stage: str, grant_id: str) -> bool:
        try:
            await self.grants.release(grant_id)
        except (EdgeUnavailable, EdgeRefused) as error:
            log.warning(
                "attempt %s: releasing the %s grant failed (%s); retried later",
                attempt_id,
                stage,
                type(error).__name__,
            )
            return False
        self.journal.grant_released(attempt_id, stage)
        return True

    async def _flush_releases(self) -> None:
        """Send due releases; any error is logged, never raised: it must not end the
        supervision pass or fail an observe whose result is already decided."""
        try:
            await self.releases.flush_when_due()
        except Exception as error:  # noqa: BLE001 - the journal keeps them for next time
            log.error("releasing repository grants failed (%s); retried later",
                      type(error).__name__)

    async def _release_grants(self, attempt_id: str) -> None:
        """The Attempt's ended stages' grants are recorded unreleased in the journal;
        the supervision pass releases them with any others within
        ``release_delay_seconds`` (one request for many, :class:`GrantReleases`)."""
        self.releases.schedule()

    async def _stop_stage(self, row: AttemptRow) -> None:
        """TERM the active stage's runner (it stops its step's process group: TERM, grace,
        KILL), wait for its status, and KILL everything left after the grace period."""
        stage_row = (
            self.journal.stage(row.attempt_id, row.state) if row.state in NEXT_STAGE else None
        )
        if stage_row is None or stage_row.state not in ("launching", "running"):
            return
        control = self._control(row, stage_row.stage)
        (control / "cancel").touch()  # a runner that has not started yet stops at once
        claim = self.processes.claim(control)
        pid, ticks = claim if claim else (stage_row.pid, stage_row.start_ticks)
        self.processes.terminate(pid, ticks)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.grace_seconds + 5.0
        while (
            loop.time() < deadline
            and self.processes.alive(pid, ticks)
            and self.processes.status(control) is None
        ):
            await asyncio.sleep(0.1)
        if self.processes.alive(pid, ticks):
            self.processes.kill(control, pid)
        status = self.processes.status(control)
        if status is not None:
            # A stage that finished on its own during cancellation keeps its outcome.
            self._finish_from_status(row, stage_row.stage, status)
        self.journal.finish_stage(
            row.attempt_id,
            stage_row.stage,
            "cancelled",
            exit_code=None,
            signal=int(signal.SIGTERM),
            code="cancelled",
            output_commit=None,
        )
        stage_row = self.journal.stage(row.attempt_id, stage_row.stage)
        if stage_row is not None and stage_row.state == "failed":
            self._set_state(row.attempt_id, "failed")
