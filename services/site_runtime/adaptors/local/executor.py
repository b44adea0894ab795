"""The local ``queued-batch`` executor: the embedded default (docs/site-runtime.md,
Local executor).

Each Attempt gets a private workspace (mode 0700) under the configured root —
``repo/`` (the checkout), ``logs/<stage>.log``, ``control/<stage>/`` (runner spec,
claim, status) — and runs stage-in → compute → stage-out as local processes that
survive a Runtime restart and are re-adopted by pid + start time
(:mod:`~.supervision`). Phases of ``observe`` (docs/site-commands.md): ``prepared`` →
``queued`` (stage-in) → ``running`` (compute, stage-out) → ``succeeded`` /
``failed`` / ``cancelled``. Once a terminal one is committed
(:meth:`LocalExecutor._set_state`), ``on_native_end`` tells the Site edge in the
background (a hint, ADR 0016).

:class:`LocalExecutor` holds its collaborators: :class:`~.supervision.StageSupervision`
(launch, poll, advance), :class:`~.start_queue.StartQueue` (slots and waiting
Attempts), :class:`~.cancellation.StageCancellation` (stopping the running stage),
:class:`~.authorisation.EdgeAuthorisation` and the shared command prologue
:class:`~site_runtime.application.journaled.JournaledExecutor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from site_runtime.adaptors.local.authorisation import EdgeAuthorisation
from site_runtime.adaptors.local.cancellation import StageCancellation
from site_runtime.adaptors.local.grant_releases import GrantReleases
from site_runtime.adaptors.local.jobs import AttemptRow, LocalJobsJournal, now_iso
from site_runtime.adaptors.local.processes import StageProcesses
from site_runtime.adaptors.local.settings import LocalSettings
from site_runtime.adaptors.local.stage_wakeups import StageWakeups
from site_runtime.adaptors.local.start_queue import StartQueue
from site_runtime.adaptors.local.supervision import (
    NEXT_STAGE,
    TERMINAL,
    StageSupervision,
    create_workspace,
)
from site_runtime.application.journaled import (
    MATERIAL_CHANGED,
    JournaledExecutor,
    handlers_of,
    material_changed,
)
from site_runtime.application.log_reads import ReadPermits, read_stage_log
from site_runtime.application.native_ends import NativeEndNotices
from site_runtime.application.ports import CommandResult, NativeEndNotice, SiteCommand
from site_runtime.application.site_access import ExecutionAuthority, RepositoryGrants
from site_runtime.domain.local_batch import (
    InvalidMaterial,
    native_jobs,
    observation,
    parse_job,
    prepared_job,
)

__all__ = ["LocalExecutor", "LocalSettings"]

log = logging.getLogger("site_runtime.local")

MIN_PASS_SECONDS = 0.02  # woken supervision passes start at least this far apart
STOP_RELEASE_SECONDS = 5.0  # at most this long for the releases a graceful stop sends


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
        self._authority = authority
        self._grants = grants
        # Read permits come from the same Site edge as execution authority by default.
        self.permits = permits or (authority if isinstance(authority, ReadPermits) else None)
        self.commands = JournaledExecutor(
            journal,
            handlers_of(self),
            unlocked=("observe",),  # it starts waiting Attempts, which takes their locks
        )
        self.processes = StageProcesses()
        self._task: asyncio.Task | None = None
        self._wakeups: StageWakeups | None = None
        self.releases = GrantReleases(journal, grants, delay_seconds=settings.release_delay_seconds)
        self.authorisation = EdgeAuthorisation(authority)
        self.supervision = StageSupervision(
            settings=settings,
            journal=journal,
            processes=self.processes,
            grants=grants,
            releases=self.releases,
            set_state=self._set_state,
            wake_socket=lambda: self._wakeups.path if self._wakeups is not None else None,
        )
        self.queue = StartQueue(
            settings=settings,
            journal=journal,
            authorisation=self.authorisation,
            supervision=self.supervision,
            lock=self._lock,
            set_state=self._set_state,
        )
        self.cancellation = StageCancellation(
            journal=journal,
            processes=self.processes,
            supervision=self.supervision,
            grace_seconds=settings.grace_seconds,
            set_state=self._set_state,
        )
        self.native_ends = NativeEndNotices(
            on_native_end, timeout_seconds=settings.notice_timeout_seconds
        )
        Path(settings.workspace_root).mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def authority(self) -> ExecutionAuthority:
        """The execution-authority port (replacing it also replaces the authorisation's)."""
        return self._authority

    @authority.setter
    def authority(self, value: ExecutionAuthority) -> None:
        self._authority = value
        self.authorisation.authority = value

    @property
    def grants(self) -> RepositoryGrants:
        """The repository-grants port (replacing it also replaces the releases' and the
        supervision's)."""
        return self._grants

    @grants.setter
    def grants(self, value: RepositoryGrants) -> None:
        self._grants = value
        self.releases.grants = value
        self.supervision.grants = value

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
                        await self.supervision.advance(row, raise_deferrals=False)
            except Exception as error:  # noqa: BLE001 - one Attempt must not stop the others
                log.error(
                    "attempt %s: runtime-error while advancing (%s)",
                    attempt_id,
                    type(error).__name__,
                )
        try:
            await self.start_waiting()
        except Exception as error:  # noqa: BLE001 - one failure must not end the pass
            log.error("runtime-error while starting waiting Attempts (%s)", type(error).__name__)
        await self.releases.flush_due_logged()

    async def start_waiting(self) -> None:
        """Launch stage-in of ``waiting`` Attempts, oldest first, while slots are free
        (:meth:`~.start_queue.StartQueue.start_waiting`)."""
        await self.queue.start_waiting()

    # ================================================================ commands
    async def prepare(self, command: SiteCommand) -> CommandResult:
        """Check the material, authorise it at the edge, create the private workspace and
        save the Attempt as ``prepared``. Refusals: ``invalid-material``,
        ``unsupported-local-inputs``, ``local-wall-time-above-limit``, ``local-request-never-fits``,
        ``material-changed``, ``authorisation-refused``. Deferrals: ``authority-unavailable``,
        ``workspace-unavailable``."""
        return await self.commands.run("prepare", command)

    async def _prepare(self, command: SiteCommand) -> CommandResult:
        try:
            job = prepared_job(
                command.run_id, command.attempt_id, command.payload, self.settings.max_wall_seconds, self.settings.machine
            )
        except InvalidMaterial as refusal:
            return self._save(command, "refused", code=refusal.code, message=str(refusal))
        existing = self.journal.attempt(command.attempt_id)
        if material_changed(existing.material if existing else None, command.payload):
            return self._save(command, "refused", code="material-changed", message=MATERIAL_CHANGED)
        refused = await self.authorisation.authorise(command.run_id, command.attempt_id, job)
        if refused is not None:
            return self._save(command, "refused", code="authorisation-refused", message=refused)
        workspace = create_workspace(Path(self.settings.workspace_root), command.attempt_id)
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
            if not self.queue.has_slot() or self.journal.waiting_attempts():
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
            refusal = await self.queue.begin(row)
            if refusal is not None:
                code, message = refusal
                return self._save(command, "refused", code=code, message=message)
        row = self.journal.attempt(command.attempt_id)
        assert row is not None
        if row.state not in TERMINAL:
            await self.supervision.advance(row, raise_deferrals=True)
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
                await self.supervision.advance(row, raise_deferrals=False)
        if waiting:
            await self.start_waiting()  # a Runtime without a supervision pass still starts it
        async with self._lock(command.attempt_id):
            result = self._result(command, "succeeded", row=self.journal.attempt(row.attempt_id))
        # Due releases go now too (a Runtime without a supervision pass still releases).
        await self.releases.flush_due_logged()
        return result

    async def cancel(self, command: SiteCommand) -> CommandResult:
        """Stop the Attempt: TERM the running stage's process group, KILL it after the
        grace period, record ``cancelled`` and never launch a later stage. The exact
        result (message ``accepted`` or ``already-terminal``) is saved and replayed; an
        Attempt this Runtime does not know is refused ``attempt-not-prepared``."""
        return await self.commands.run("cancel", command)

    async def _cancel(self, command: SiteCommand) -> CommandResult:
        row = self.journal.attempt(command.attempt_id)
        assert row is not None  # the prologue refused an unknown Attempt's stop
        if row.state in TERMINAL:
            await self.supervision.release_grants(row.attempt_id)
            # A cancellation accepted before a restart keeps its answer.
            answer = "accepted" if row.cancel_result else "already-terminal"
            return self._save(command, "succeeded", message=answer, row=row)
        # The intent first: a restart during the kill finishes the cancellation.
        self._set_state(row.attempt_id, row.state, cancel_result="accepted")
        await self.cancellation.stop_stage(row)
        row = self.journal.attempt(row.attempt_id)
        assert row is not None
        if row.state not in TERMINAL:
            self._set_state(row.attempt_id, "cancelled")
        await self.supervision.release_grants(row.attempt_id)
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
        row = self.journal.attempt(command.attempt_id)
        assert row is not None
        logs = row.workspace / "logs"
        return await read_stage_log(
            command, self.permits, NEXT_STAGE, lambda stage: logs / f"{stage}.log"
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
