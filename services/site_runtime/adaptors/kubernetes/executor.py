"""The ``kubernetes`` executor of ``k8s-job`` Attempts (queued-batch; docs/site-runtime.md,
Kubernetes).

One class holding its collaborators: the Kubernetes API (:mod:`.api`, lightkube), its
``jobs.sqlite`` journal (:mod:`.journal`), the Site edge for ``authorise`` and
repository grants, and the exactly-once object operations (:mod:`.objects`).

- ``prepare``: check the material against the Site's settings (GPU class map, wall
  time), authorise at the edge, create the workspace PVC and the preparation helper
  Pod with its stage-in grant Secret. A definite refusal deletes what was made.
- ``start``: authorise again; the Job is created as soon as the preparation Pod
  succeeded (at once, or by a later observe or supervision pass).
- ``observe``: one snapshot (one list of Jobs, one of Pods) per cycle for every
  active Attempt; advances stages; an unreachable API gives phase ``unknown``.
- ``cancel``: deletes the Job and helper Pods by exact uid (foreground), confirms
  their absence, saves and replays the exact answer; a stage that ended first keeps
  its natural outcome.
- cleanup (supervision pass): helper Pods and Secrets of ended Attempts deleted and
  grants revoked; the PVC and Job kept for ``retention_seconds`` for reads, then
  deleted with a journalled tombstone. An unavailable API defers it, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from site_runtime.adaptors.kubernetes.api import KubeApi, KubeError
from site_runtime.adaptors.kubernetes.cleanup import Cleanup
from site_runtime.adaptors.kubernetes.journal import (
    TERMINAL,
    AttemptRow,
    KubernetesJournal,
    now_iso,
)
from site_runtime.adaptors.kubernetes.logs import PodLogReads
from site_runtime.adaptors.kubernetes.objects import NativeObjects, NativeRefused, identity_of
from site_runtime.adaptors.kubernetes.settings import KubernetesSettings
from site_runtime.adaptors.kubernetes.stages import Snapshots, StageDriver
from site_runtime.adaptors.local.authorisation import EdgeAuthorisation
from site_runtime.application.delivery import EdgeRefused
from site_runtime.application.journaled import (
    MATERIAL_CHANGED,
    JournaledExecutor,
    handlers_of,
    material_changed,
)
from site_runtime.application.log_reads import ReadPermits
from site_runtime.application.native_ends import NativeEndNotices
from site_runtime.application.ports import CommandResult, Deferred, NativeEndNotice, SiteCommand
from site_runtime.application.site_access import ExecutionAuthority, RepositoryGrants
from site_runtime.domain.kubernetes_batch import parse_kubernetes_job
from site_runtime.domain.kubernetes_manifests import workspace_claim
from site_runtime.domain.kubernetes_observation import StageEnd, observation
from site_runtime.domain.local_batch import InvalidMaterial

log = logging.getLogger("site_runtime.kubernetes")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
STAGES = ("stage-in", "compute", "stage-out")


class KubernetesExecutor:
    """``QueuedBatchExecutor`` on a Kubernetes Site (see the module doc)."""

    def __init__(
        self,
        settings: KubernetesSettings,
        journal: KubernetesJournal,
        api: KubeApi,
        authority: ExecutionAuthority,
        grants: RepositoryGrants,
        permits: ReadPermits | None = None,
        on_native_end: NativeEndNotice | None = None,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        """``fault`` is for the recovery tests (:class:`NativeObjects`)."""
        self.settings = settings
        self.site = settings.site
        self.journal = journal
        self.api = api
        self.authority = authority
        self.authorisation = EdgeAuthorisation(authority)
        self.permits = permits or (authority if isinstance(authority, ReadPermits) else None)
        self.objects = NativeObjects(api, journal, fault=fault)
        self.stages = StageDriver(self.site, journal, api, self.objects, grants, self._end)
        self.logs = PodLogReads(api, journal)
        self.objects.before_delete = self.logs.keep  # a helper's log outlives its Pod
        self.cleanup = Cleanup(journal, self.objects, self.stages, self.site.site_id)
        self.native_ends = NativeEndNotices(on_native_end, timeout_seconds=5.0)
        self.snapshots = Snapshots(api, self.site.site_id)
        self._task: asyncio.Task | None = None
        self.commands = JournaledExecutor(
            journal,
            handlers_of(self),
        )

    async def prepare(self, command: SiteCommand) -> CommandResult:
        """Check, authorise and create the PVC and preparation Pod. Refusals: those of
        ``domain/kubernetes_batch.REFUSALS``. Deferrals: ``authority-unavailable``,
        ``repository-unavailable``, ``kubernetes-unavailable``."""
        return await self.commands.run("prepare", command)

    async def start(self, command: SiteCommand) -> CommandResult:
        """Authorise again and create the Job once stage-in succeeded. Refusals:
        ``attempt-not-prepared``, ``attempt-deadline-passed``, ``authorisation-refused``."""
        return await self.commands.run("start", command)

    async def observe(self, command: SiteCommand) -> CommandResult:
        """Advance the Attempt from one snapshot and report its observation."""
        return await self.commands.run("observe", command)

    async def cancel(self, command: SiteCommand) -> CommandResult:
        """Delete the Attempt's Job and Pods by exact uid; message ``accepted``,
        ``already-terminal`` or ``not-found`` (saved, replayed)."""
        return await self.commands.run("cancel", command)

    async def recover(self, command: SiteCommand) -> CommandResult:
        """Handle a command journaled as in flight again (every handler is idempotent)."""
        return await self.commands.recover(command)

    async def read_log(self, command: SiteCommand) -> CommandResult:
        """A stage's Pod log under the viewer's read permit (10 s, ≤ 5 MiB)."""
        return await self.commands.run("read-log", command)

    # ================================================================ background
    async def start_supervision(self) -> None:
        """Advance active Attempts and clean up ended ones every ``poll_seconds``, so
        progress and cleanup do not wait for an observe."""
        if self._task is None:
            self._task = asyncio.create_task(self._supervise())

    async def stop_supervision(self) -> None:
        """Stop the passes (native objects keep running; a restart adopts them)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.native_ends.close()

    async def close(self) -> None:
        """Close the API connections and the journal."""
        await self.api.close()
        self.journal.close()

    async def _supervise(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as error:  # noqa: BLE001 - the passes must go on
                log.error("supervision pass failed (%s)", type(error).__name__)
            await asyncio.sleep(self.settings.poll_seconds)

    async def tick(self) -> None:
        """One pass: one snapshot, every started Attempt advanced, cleanup due done."""
        active = self.journal.active_attempts()
        snapshot = await self.snapshots.fresh() if active else None
        for attempt_id in active:
            lock = self.commands.lock(attempt_id)
            if lock.locked():
                continue  # a command is advancing it now
            async with lock:
                row = self.journal.attempt(attempt_id)
                if row is None or snapshot is None:
                    continue
                try:
                    if row.state == "prepared":
                        await self.stages.settle_preparation(row, snapshot)
                        continue
                    await self.stages.advance(row, snapshot)
                except Deferred as error:
                    log.info("attempt %s: not advanced now (%s)", attempt_id, error.code)
        await self.cleanup.pass_()

    async def _cleanup_quietly(self, attempt_id: str) -> None:
        """Clean up now what can be; what cannot stays for the supervision pass."""
        try:
            await self.cleanup.attempt(attempt_id)
        except Deferred as error:
            log.info("attempt %s: cleanup deferred (%s)", attempt_id, error.code)

    # ================================================================ handlers
    async def _prepare(self, command: SiteCommand) -> CommandResult:
        try:
            if not _ID.match(command.attempt_id) or not _ID.match(command.run_id):
                raise InvalidMaterial("invalid-material", "malformed run or attempt id")
            kjob = parse_kubernetes_job(command.payload, self.site)
        except InvalidMaterial as refusal:
            return self._save(command, "refused", code=refusal.code, message=str(refusal))
        existing = self.journal.attempt(command.attempt_id)
        if material_changed(existing.material if existing else None, command.payload):
            return self._save(command, "refused", code="material-changed", message=MATERIAL_CHANGED)
        if existing is not None and existing.state == "refused":
            return self._save(command, "refused", code=existing.code, message="refused before")
        refused = await self._authorise(command.run_id, command.attempt_id, command.payload)
        if refused is not None:
            return self._save(command, "refused", code="authorisation-refused", message=refused)
        row = self.journal.insert_attempt(
            command.attempt_id,
            command.run_id,
            command.attempt_number,
            command.payload,
            kjob.member.namespace,
        )
        identity = identity_of(row, self.site.site_id)
        try:
            await self.objects.ensure(
                row,
                "workspace",
                workspace_claim(self.site, identity, row.namespace),
                identity,
                user=kjob.member.user,
                groups=kjob.member.groups,
            )
            await self.stages.begin_helper(row, "stage-in")
        except (NativeRefused, EdgeRefused) as error:
            code = error.code if isinstance(error, NativeRefused) else "authorisation-refused"
            self.journal.set_state(row.attempt_id, "refused", code=code, cleanup_due=time.time())
            await self._cleanup_quietly(row.attempt_id)
            return self._save(command, "refused", code=code, message=str(error))
        return self._save(command, "succeeded", row=self.journal.attempt(row.attempt_id))

    async def _start(self, command: SiteCommand) -> CommandResult:
        # Progress is committed with the Job's intent or the result (.group_commit).
        with self.journal.grouped():
            result = await self._start_grouped(command)
            await self.journal.durable()  # the result is durable before the answer
        return result

    async def _start_grouped(self, command: SiteCommand) -> CommandResult:
        row = self.journal.attempt(command.attempt_id)
        assert row is not None
        if row.state == "refused":
            return self._save(
                command,
                "refused",
                code="attempt-not-prepared",
                message="the Attempt's prepare was refused",
            )
        if row.state == "prepared":
            deadline = self.stages.job(row).job.deadline
            if deadline is not None and deadline.timestamp() <= time.time():
                self.journal.set_state(
                    row.attempt_id,
                    "refused",
                    code="attempt-deadline-passed",
                    cleanup_due=time.time(),
                )
                return self._save(
                    command,
                    "refused",
                    code="attempt-deadline-passed",
                    message="the Attempt's deadline has passed; nothing was started",
                )
            refused = await self._authorise(row.run_id, row.attempt_id, row.material)
            if refused is not None:
                self.journal.set_state(
                    row.attempt_id, "refused", code="authorisation-refused", cleanup_due=time.time()
                )
                return self._save(command, "refused", code="authorisation-refused", message=refused)
            self.journal.set_state(row.attempt_id, "stage-in")
            row = self.journal.attempt(row.attempt_id) or row
        if row.state not in TERMINAL:
            await self.stages.advance(row, await self.snapshots.shared())
        return self._save(command, "succeeded", row=self.journal.attempt(row.attempt_id))

    async def _observe(self, command: SiteCommand) -> CommandResult:
        row = self.journal.attempt(command.attempt_id)
        assert row is not None
        current = None
        if row.state in ("prepared", "stage-in", "compute", "stage-out"):
            try:
                snapshot = await self.snapshots.cycle()
                if row.state == "prepared":
                    await self.stages.settle_preparation(row, snapshot)
                else:
                    await self.stages.advance(row, snapshot)
                row = self.journal.attempt(row.attempt_id) or row
                stage = "stage-in" if row.state == "prepared" else row.state
                if row.state not in TERMINAL:
                    current = await self.stages.state(row, stage, snapshot)
            except (Deferred, KubeError) as error:
                log.info("attempt %s: observed without the API (%s)", row.attempt_id, error)
                result = self._result(command, "succeeded", row=row)
                assert result.observation is not None
                result.observation.update(phase="unknown", native_state="Unknown")
                return result
        return self._result(command, "succeeded", row=row, current=current)

    async def _cancel(self, command: SiteCommand) -> CommandResult:
        row = self.journal.attempt(command.attempt_id)
        assert row is not None  # the prologue refused an unknown Attempt's stop
        if row.state in TERMINAL or row.state == "refused":
            answer = "accepted" if row.cancel_result else "already-terminal"
            return self._save(command, "succeeded", message=answer, row=row)
        self.journal.set_cancel_result(row.attempt_id, "accepted")  # the intent first
        row = self.journal.attempt(row.attempt_id) or row
        deleting = any(o.state == "deleting" for o in self.journal.objects(row.attempt_id))
        if row.state != "prepared" and not deleting:
            with contextlib.suppress(Deferred):
                await self.stages.advance(row, None)  # a stage that ended keeps its outcome
            row = self.journal.attempt(row.attempt_id) or row
        if row.state not in TERMINAL:
            identity = identity_of(row, self.site.site_id)
            for role in ("compute", "stage-out", "stage-in"):
                obj = self.journal.object(row.attempt_id, role)
                if obj is None:  # never to be created now
                    kind = "Job" if role == "compute" else "Pod"
                    self.journal.tombstone(row.attempt_id, role, kind, "-")
                else:
                    await self.objects.delete(row, role, identity)
            await self._end(row, "cancelled", "cancelled", None)
        await self._cleanup_quietly(row.attempt_id)
        return self._save(
            command, "succeeded", message="accepted", row=self.journal.attempt(row.attempt_id)
        )

    async def _read_log(self, command: SiteCommand) -> CommandResult:
        return await self.logs.read(command, self.permits)

    # ================================================================ internals
    async def _authorise(self, run_id: str, attempt_id: str, payload: dict[str, Any]) -> str | None:
        """None when the edge authorises the execution now, the refusal text otherwise
        (the same request as every executor's; raises Deferred ``authority-unavailable``)."""
        job = parse_kubernetes_job(payload, self.site).job
        return await self.authorisation.authorise(run_id, attempt_id, job)

    async def _end(self, row: AttemptRow, state: str, code: str | None, output: str | None) -> None:
        now = time.time()
        self.journal.set_state(
            row.attempt_id,
            state,
            code=code,
            output_commit=output,
            ended_at=now,
            cleanup_due=now + self.settings.retention_seconds,
        )
        log.info("attempt %s: %s%s", row.attempt_id, state, f" ({code})" if code else "")
        self.native_ends.notice(row.attempt_id)

    def _result(
        self,
        command: SiteCommand,
        outcome: str,
        *,
        code: str | None = None,
        message: str | None = None,
        row: AttemptRow | None = None,
        current=None,
    ) -> CommandResult:
        if row is None:
            return CommandResult(command.command_id, outcome, code, message)
        objects = self.journal.objects(row.attempt_id)
        ends = [
            StageEnd(o.role, o.name, o.exit_code, o.signal, o.code)
            for o in objects
            if o.role in STAGES and o.ended
        ]
        jobs = [{"stage": o.role, "job_id": o.name} for o in objects if o.role in STAGES and o.uid]
        state = row.state if row.state != "refused" else "failed"
        return CommandResult(
            command.command_id,
            outcome,
            code,
            message,
            native_jobs=jobs,
            observation=observation(
                state, ends=ends, current=current, output=row.output_commit, observed_at=now_iso()
            ),
        )

    def _save(self, command: SiteCommand, outcome: str, **kwargs: Any) -> CommandResult:
        result = self._result(command, outcome, **kwargs)
        return CommandResult(**self.journal.save_result(command.command_id, result.to_json()))
