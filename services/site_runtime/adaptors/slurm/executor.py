"""The slurm executor: one ``queued-batch`` Attempt as three dependent Slurm jobs
(docs/site-runtime.md, Slurm executor; docs/slurm-lab.md).

``stage-in`` → ``compute`` → ``stage-out``, each joined to the stage before by ``afterok``.
A stage is submitted when the stage before has completed (a restart after a completed
stage-in resumes with compute; each staging job gets a just-in-time repository grant).

Jobs are submitted *held* and released only once their id is saved, so a submission
whose answer was lost is settled by exact identity (``domain/slurm_settling.py``).

The member token is fetched through :class:`MemberTokens` and verified before every
native request (``SlurmRest``); it is never written anywhere (journal, log, script).

:class:`SlurmExecutor` holds its collaborators and calls the domain:

* ``SlurmRest`` (``rest.py``), ``SlurmJournal`` (``journal.py``), the Site edge's
  member tokens, grants and authority (``adaptors/edge/client.py``);
* :class:`~.submission.StageSubmissions` — the held-submission protocol;
* :class:`~.progress.ChainProgress` — observing, advancing, deciding, cleanup;
* :class:`~.cancellation.ChainCancellation` — cancellation newest to oldest;
* :class:`~.array_start.ArrayStarts` — ``start-array`` (a collection as arrays);
* :class:`~site_runtime.application.journaled.JournaledExecutor` — the prologue of
  every command (saved-result replay, per-Attempt lock, ``attempt-not-prepared``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from metallo.identity.verify import MemberCredential, MemberTokenRejected
from site_runtime.adaptors.slurm import views
from site_runtime.adaptors.slurm.array_grant_renewal import ArrayGrantRenewal
from site_runtime.adaptors.slurm.array_journal import ArrayJournal
from site_runtime.adaptors.slurm.array_material import ArrayMaterial
from site_runtime.adaptors.slurm.array_start import ArrayStarts
from site_runtime.adaptors.slurm.arrays import ArraySubmissions
from site_runtime.adaptors.slurm.authority import authorise
from site_runtime.adaptors.slurm.cancellation import ChainCancellation
from site_runtime.adaptors.slurm.capacity import PartitionCapacity
from site_runtime.adaptors.slurm.errors import SiteWideDeferred, deferring
from site_runtime.adaptors.slurm.grants import StageGrants
from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal
from site_runtime.adaptors.slurm.material import Refusal, prepared_record
from site_runtime.adaptors.slurm.progress import ChainProgress
from site_runtime.adaptors.slurm.rest import SlurmRefused, SlurmRest
from site_runtime.adaptors.slurm.settings import SlurmSettings
from site_runtime.adaptors.slurm.submission import (
    ConsentRefused,
    DeadlinePassed,
    StageSubmissions,
    log_path,
)
from site_runtime.application.journaled import JournaledExecutor
from site_runtime.application.log_reads import ReadPermits, read_stage_log
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand
from site_runtime.application.site_access import (
    ExecutionAuthority,
    MemberTokens,
    RepositoryGrants,
)
from site_runtime.domain.consent import CONSENT_REFUSED, refusal_text
from site_runtime.domain.native_errors import attempt_pending_expired, pending_confidence
from site_runtime.domain.slurm_capacity import NEVER_FITS, never_fits
from site_runtime.domain.slurm_chain import deadline_refuses
from site_runtime.domain.slurm_refusals import DEADLINE_TEXT, stage_in_refusal_text
from site_runtime.domain.slurm_stages import STAGES

log = logging.getLogger("metallo.site_runtime.slurm")


class SlurmExecutor:
    """``QueuedBatchExecutor`` on Slurm through slurmrestd (see the module doc).

    ``authority`` (execution authority; also the read permits when it offers them)
    may be replaced at any time. ``fault`` is called with a step name at each
    recovery point (``intent:<stage>``, ``posted:<stage>``, ``held:<stage>``,
    ``cancel-intent``, ``cancelled:<stage>``); tests use it to stop the process at
    exactly that point.
    """

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
        self.authority = authority
        self.clock = clock
        self.fault = fault
        self.grants = StageGrants(journal, grants)
        self.submissions = StageSubmissions(
            journal=journal, rest=rest, tokens=tokens, grants=self.grants, clock=clock, fault=fault
        )
        self.array_material = ArrayMaterial(journal, self.grants, clock)
        renew = settings.array_grant_renew_seconds
        self.progress = ChainProgress(
            journal=journal,
            array_material=self.array_material,
            renewal=ArrayGrantRenewal(self.array_material, grants, rest, clock, renew),
            rest=rest,
            submissions=self.submissions,
            grants=self.grants,
            clock=clock,
            deadlines=settings.reconciliation,
        )
        self.cancellation = ChainCancellation(
            journal=journal,
            rest=rest,
            submissions=self.submissions,
            fault=fault,
            clock=clock,
            deadlines=settings.reconciliation,
        )
        self._pending_since: dict[str, float] = {}
        self.capacity = PartitionCapacity(rest)
        self.arrays = ArrayJournal(journal)
        self.array_starts = ArrayStarts(
            journal=journal,
            arrays=self.arrays,
            submissions=ArraySubmissions(
                journal=journal, arrays=self.arrays, rest=rest, clock=clock, fault=fault
            ),
            stages=self.submissions,
            material=self.array_material,
            authorise=lambda run, attempt, record: authorise(self.authority, run, attempt, record),
            never_fits=self._never_fits,
            clock=clock,
        )
        self.commands = JournaledExecutor(
            journal,
            {
                "prepare": self._prepare,
                "start": self._start,
                "start-array": self._start_array,
                "observe": self._observe,
                "cancel": self._cancel,
                "read-log": self._read_log,
            },
        )

    # ------------------------------------------------------------------ commands
    async def prepare(self, command: SiteCommand) -> CommandResult:
        """Save the Attempt and three ``prepared`` stages; refuse what cannot run here.

        Refusals (before any workspace effect): ``unsupported-slurm-accelerator-class``,
        ``slurm-wall-time-above-limit``, ``unsupported-slurm-inputs``,
        ``invalid-material``, ``binding-changed``, ``idempotency-conflict``,
        ``authorisation-refused``.
        """
        return await self.commands.run("prepare", command)

    async def start(self, command: SiteCommand) -> CommandResult:
        """Submit stage-in (held, then released) and answer ``queued``.

        Refusals: ``attempt-not-prepared``, ``attempt-deadline-passed``,
        ``slurm-error-<n>``, ``member-token-rejected``, ``authorisation-refused``,
        ``member-consent-refused`` (the member-token owner refused for good).
        Deferrals: ``slurm-submission-limited``, ``slurm-unavailable``,
        ``slurm-observation-unavailable``, ``identity-provider-unavailable``,
        ``repository-unavailable``, ``authority-unavailable``.
        """
        return await self.commands.run("start", command)

    async def start_array(self, command: SiteCommand) -> CommandResult:
        """Start a group's prepared children as three held arrays (``array_start.py``:
        refusals and deferrals)."""
        return await self.commands.run("start-array", command)

    async def observe(self, command: SiteCommand) -> CommandResult:
        """Observe the chain, submit the next stage when its predecessor completed.

        Phases: ``queued`` (stage-in, compute pending), ``running`` (compute
        started, stage-out; never back), ``succeeded``/``failed``/``cancelled``
        once decided and cleaned up. One native list request serves every
        Attempt observed within the list cache time.
        """
        return await self.commands.run("observe", command)

    async def cancel(self, command: SiteCommand) -> CommandResult:
        """Cancel the whole chain, newest job first; the exact result is saved and replayed.

        ``message`` is ``accepted``, ``already-terminal`` or ``not-found`` (slurmctld
        knows none of its jobs); an Attempt this Runtime does not know is refused
        ``attempt-not-prepared``.
        """
        return await self.commands.run("cancel", command)

    async def recover(self, command: SiteCommand) -> CommandResult:
        """Finish a command journaled as in flight before a restart (same paths, idempotent)."""
        return await self.commands.recover(command)

    async def read_log(self, command: SiteCommand) -> CommandResult:
        """The tail of one stage's Attempt-scoped log (or, with ``offset``, the log from
        that byte on; at most ``max_bytes``, ≤ 5 MiB), also while the Attempt runs,
        read only under the viewer's read permit from the Site edge
        (``application/log_reads.py``: permit, confirm, read, confirm; ten seconds at
        most). Refusals: ``unknown-stage``, ``attempt-not-prepared`` and those of
        :func:`permitted_read`."""
        return await self.commands.run("read-log", command)

    async def close(self) -> None:
        """Close the slurmrestd connections and ``jobs.sqlite`` (Slurm jobs keep running)."""
        await self.rest.close()
        self.journal.close()

    # ------------------------------------------------------------------ handlers
    async def _prepare(self, command: SiteCommand) -> CommandResult:
        try:
            record = prepared_record(command, self.settings, self.clock)
        except Refusal as refusal:
            return self._refuse(command, refusal.code, str(refusal))
        existing = self.journal.attempt(command.attempt_id)
        if existing is None:
            refused = await authorise(self.authority, command.run_id, command.attempt_id, record)
            if refused is not None:
                return self._refuse(command, "authorisation-refused", refused)
            self.journal.create_attempt(
                attempt_id=command.attempt_id,
                run_id=command.run_id,
                attempt_number=command.attempt_number,
                site_id=command.site_id,
                record=record,
                stages=STAGES,
            )
        elif existing.record["binding"] != record["binding"]:
            return self._refuse(
                command, "binding-changed", "the member binding differs from the saved one"
            )
        elif existing.record["material_digest"] != record["material_digest"]:
            return self._refuse(
                command, "idempotency-conflict", "the Attempt was prepared with other material"
            )
        observation = views.current("prepared", self.clock())
        return self._save(
            command, CommandResult(command.command_id, "succeeded", observation=observation)
        )

    async def _start_array(self, command: SiteCommand) -> CommandResult:
        return self._save(command, await self.array_starts.start_array(command))

    async def _start(self, command: SiteCommand) -> CommandResult:
        att = views.attempt(self.journal, command.attempt_id)
        if att.outcome is not None or att.cancel_state is not None:
            return await self.progress.observe(command, att)
        if (in_array := self.array_starts.child_start(command, att)) is not None:
            return self._save(command, in_array)
        stage_in = self.journal.stages(att.attempt_id)["stage-in"]
        if stage_in.state == "refused":
            code = (stage_in.refusal or {}).get("code")
            if code == CONSENT_REFUSED:
                await self.progress.cleanup(att)  # the rejection comes once cleanup is done
            return self._refuse(command, code, stage_in_refusal_text(code, stage_in.refusal))
        if stage_in.state == "prepared":
            refused = await authorise(self.authority, att.run_id, att.attempt_id, att.record)
            if refused is not None:
                return self._refuse(command, "authorisation-refused", refused)
            if deadline_refuses("stage-in", att.record.get("deadline_epoch"), self.clock()):
                return self._refuse(command, "attempt-deadline-passed", DEADLINE_TEXT)
        try:
            credential = await self.submissions.credential(att)
            if stage_in.state == "prepared":
                reason = await self._never_fits(att, credential)
                if reason is not None:
                    return self._refuse(command, NEVER_FITS, reason)
            await self.submissions.ensure_submitted(att, "stage-in", None, credential)
        except SlurmRefused as refused:
            return self._refuse(command, refused.code, stage_in_refusal_text(refused.code))
        except DeadlinePassed:
            return self._refuse(command, "attempt-deadline-passed", DEADLINE_TEXT)
        except MemberTokenRejected as rejected:
            log.warning("attempt %s: member token rejected (%s)", att.attempt_id, rejected.reason)
            return self._refuse(
                command,
                "member-token-rejected",
                f"the member token was refused ({rejected.reason})",
            )
        except ConsentRefused as refused:
            return await self._start_consent_refused(command, att, refused.reason)
        native = views.reported_state(self.journal, att.attempt_id)
        return self._save(
            command,
            CommandResult(
                command.command_id,
                "succeeded",
                native_jobs=views.native_jobs(self.journal, att.attempt_id),
                observation=views.current("queued", self.clock(), native),
            ),
        )

    async def _start_consent_refused(
        self, command: SiteCommand, att: AttemptRow, reason: str
    ) -> CommandResult:
        """The member-token owner refused for good at ``start``. Before stage-in the
        refusal is saved on stage-in, the workspace cleaned up and ``start`` refused;
        once stage-in exists natively the Attempt fails after its cleanup."""
        if self.journal.stages(att.attempt_id)["stage-in"].state == "prepared":
            refusal = {"code": CONSENT_REFUSED, "reason": reason}
            self.journal.update_stage(att.attempt_id, "stage-in", state="refused", refusal=refusal)
            await self.progress.cleanup(att)
            return self._refuse(command, CONSENT_REFUSED, refusal_text(reason))
        self.progress.consent_refused(att)
        return await self.progress.finish(command, views.attempt(self.journal, att.attempt_id))

    async def _never_fits(self, att: AttemptRow, credential: MemberCredential) -> str | None:
        """Why the compute request can never fit its partition (None: it can)."""
        compute = att.record["compute"]
        with deferring(att.attempt_id, token_rejection=False):
            record = await self.capacity.partition(
                compute["partition"], credential=credential, user=att.record["binding"]["user"]
            )
        return never_fits(compute, record)

    async def _observe(self, command: SiteCommand) -> CommandResult:
        att = views.attempt(self.journal, command.attempt_id)
        try:
            result = await self.progress.observe(command, att)
        except SiteWideDeferred:
            raise
        except Deferred as deferral:
            # A condition of this Attempt alone keeps its observe pending for a
            # bounded time only; then the answer is what is known, marked doubtful.
            now = self.clock()
            since = self._pending_since.setdefault(att.attempt_id, now)
            if not attempt_pending_expired(since, now, self.settings.attempt_pending_seconds):
                raise
            log.warning(
                "attempt %s: observe pending %.0f s (%s); answering with what is known",
                att.attempt_id,
                now - since,
                deferral.code,
            )
            return self.progress.known(command, att, pending_confidence(deferral.code))
        self._pending_since.pop(att.attempt_id, None)
        return result

    async def _cancel(self, command: SiteCommand) -> CommandResult:
        att = self.journal.attempt(command.attempt_id)
        assert att is not None  # the prologue refused an unknown Attempt's stop
        if att.cancel_result is None:
            if att.cancel_state is None:
                self.journal.update_attempt(att.attempt_id, cancel_state="requested")
            self.fault("cancel-intent")
            try:
                result = await self.cancellation.cancel_chain(
                    views.attempt(self.journal, att.attempt_id)
                )
            except ConsentRefused:
                # Nothing can be cancelled as a member who may no longer act: the
                # Attempt ends member-consent-refused and the cancel finds it ended.
                self.progress.consent_refused(views.attempt(self.journal, att.attempt_id))
                result = "already-terminal"
            self.journal.update_attempt(att.attempt_id, cancel_result=result, cancel_state="done")
        return self._save(
            command, self._cancel_result(command, views.attempt(self.journal, att.attempt_id))
        )

    async def _read_log(self, command: SiteCommand) -> CommandResult:
        att = views.attempt(self.journal, command.attempt_id)

        def log_file(stage: str) -> Path:
            return log_path(att, stage)  # a child of an array group: its task's log

        # Read permits come from the Site edge that also authorises execution.
        permits = self.authority if isinstance(self.authority, ReadPermits) else None
        return await read_stage_log(command, permits, STAGES, log_file)

    # ------------------------------------------------------------------ helpers
    def _save(self, command: SiteCommand, result: CommandResult) -> CommandResult:
        self.journal.save_result(
            command.command_id, command.attempt_id, command.kind, result.to_json()
        )
        return result

    def _refuse(self, command: SiteCommand, code: str | None, message: str) -> CommandResult:
        return self._save(command, CommandResult(command.command_id, "refused", code, message))

    def _cancel_result(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        phase = (att.outcome or {}).get("phase") or "cancelled"
        observation = att.outcome or views.current(phase, self.clock(), "CANCELLED")
        return CommandResult(
            command.command_id,
            "succeeded",
            message=att.cancel_result,
            native_jobs=views.native_jobs(self.journal, att.attempt_id),
            observation=observation,
        )
