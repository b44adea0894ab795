"""The slurm executor: one ``queued-batch`` Attempt as three dependent Slurm jobs.

Seed 000 (Staged Slurm batch execution), seed 001 (Slurm refusals, deferrals,
failure records), seed 003 (observation and immutable terminal evidence), issue 6.

``stage-in`` → ``compute`` → ``stage-out``, each joined to the stage before by
``afterok``.  A stage is submitted when the stage before has completed (so a
restart after a completed stage-in resumes with compute without cloning again,
and each staging job gets a just-in-time repository grant).

Every stage moves ``prepared`` → ``submitting`` (intent and exact request saved
before the POST) → ``held`` (job id saved) → ``submitted`` (released).  Jobs are
submitted *held* and released only once their id is saved, so a submission
whose answer was lost is settled by an exact-identity lookup: a held job with
the stage's name, comment, account and user is adopted; several stop progress;
none in slurmctld (where a held job cannot have finished) means the POST never
created a job, and the saved request is sent again — any late duplicate stays
held, never runs, and is cancelled by the next observation.

The member token is fetched through :class:`MemberTokens` and verified before
every native request (``SlurmRest``); it is never written to the journal, a log
line, an exception, an environment or a script.

The executor is assembled from one part per concern:

* :mod:`~site_runtime.adaptors.slurm_material` — the prepared record and refusals;
* :mod:`~site_runtime.adaptors.slurm_rendering` — identity and exact requests;
* :mod:`~site_runtime.adaptors.slurm_submission` — the held-submission protocol;
* :mod:`~site_runtime.adaptors.slurm_grants` — just-in-time repository grants;
* :mod:`~site_runtime.adaptors.slurm_observation` — observing and advancing;
* :mod:`~site_runtime.adaptors.slurm_outcome` — terminal decision, failure records, cleanup;
* :mod:`~site_runtime.adaptors.slurm_cancellation` — cancellation newest-to-oldest;
* :mod:`~site_runtime.adaptors.slurm_chain_base` — shared state and journal views.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from metallo.identity.verify import MemberTokenRejected
from site_runtime.adaptors.slurm_access import SlurmRefused
from site_runtime.adaptors.slurm_cancellation import ChainCancellation
from site_runtime.adaptors.slurm_edge import EdgeRefused, EdgeUnavailable
from site_runtime.adaptors.slurm_job_model import STAGES
from site_runtime.adaptors.slurm_material import Refusal, prepared_record
from site_runtime.adaptors.slurm_observation import ChainObservation
from site_runtime.adaptors.slurm_submission import DeadlinePassed
from site_runtime.application.log_reads import ReadPermits, permitted_read, read_span
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand

log = logging.getLogger("metallo.site_runtime.slurm")

MAX_LOG_BYTES = 5 * 1024 * 1024


class SlurmExecutor(ChainObservation, ChainCancellation):
    """``QueuedBatchExecutor`` on Slurm through slurmrestd (seed 000).

    ``fault`` is called with a step name at each recovery point
    (``intent:<stage>``, ``posted:<stage>``, ``held:<stage>``, ``cancel-intent``,
    ``cancelled:<stage>``); the default does nothing, tests use it to stop the
    process at exactly that point.
    """

    async def prepare(self, command: SiteCommand) -> CommandResult:
        """Save the Attempt and three ``prepared`` stages; refuse what cannot run here.

        Refusals (before any workspace effect): ``unsupported-slurm-accelerator-class``,
        ``slurm-wall-time-above-limit``, ``unsupported-slurm-inputs``,
        ``invalid-material``, ``binding-changed``.
        """
        return await self.commands.run("prepare", command)

    async def _prepare(self, command: SiteCommand) -> CommandResult:
        try:
            record = prepared_record(command, self.settings, self.clock)
        except Refusal as refusal:
            return self._save(
                command,
                CommandResult(command.command_id, "refused", refusal.code, str(refusal)),
            )
        existing = self.journal.attempt(command.attempt_id)
        if existing is None:
            refused = await self._authorise(command.run_id, command.attempt_id, record)
            if refused is not None:
                return self._save(
                    command,
                    CommandResult(command.command_id, "refused", "authorisation-refused", refused),
                )
        if existing is not None:
            if existing.record["binding"] != record["binding"]:
                return self._save(
                    command,
                    CommandResult(
                        command.command_id,
                        "refused",
                        "binding-changed",
                        "the member binding differs from the saved one",
                    ),
                )
            if existing.record["material_digest"] != record["material_digest"]:
                return self._save(
                    command,
                    CommandResult(
                        command.command_id,
                        "refused",
                        "idempotency-conflict",
                        "the Attempt was prepared with other material",
                    ),
                )
        else:
            self.journal.create_attempt(
                attempt_id=command.attempt_id,
                run_id=command.run_id,
                attempt_number=command.attempt_number,
                site_id=command.site_id,
                record=record,
                stages=STAGES,
            )
        att = self._attempt(command.attempt_id)
        return self._save(
            command,
            CommandResult(
                command.command_id, "succeeded", observation=self._observation(att, "prepared")
            ),
        )

    async def start(self, command: SiteCommand) -> CommandResult:
        """Submit stage-in (held, then released) and answer ``queued``.

        Refusals: ``attempt-not-prepared``, ``attempt-deadline-passed``,
        ``slurm-error-<n>``, ``member-token-rejected``.  Deferrals:
        ``slurm-submission-limited``, ``slurm-unavailable``,
        ``slurm-observation-unavailable``, ``identity-provider-unavailable``,
        ``repository-unavailable``.
        """
        return await self.commands.run("start", command)

    async def _start(self, command: SiteCommand) -> CommandResult:
        att = self._attempt(command.attempt_id)
        if att.outcome is not None or att.cancel_state is not None:
            return await self._observe_locked(command, att)
        stage_in = self.journal.stages(att.attempt_id)["stage-in"]
        if stage_in.state == "refused":
            refusal = stage_in.refusal or {}
            return self._save(
                command,
                CommandResult(
                    command.command_id,
                    "refused",
                    refusal.get("code"),
                    _refusal_text(refusal.get("code")),
                ),
            )
        if stage_in.state == "prepared":
            refused = await self._authorise(att.run_id, att.attempt_id, att.record)
            if refused is not None:
                return self._save(
                    command,
                    CommandResult(command.command_id, "refused", "authorisation-refused", refused),
                )
            deadline = att.record.get("deadline_epoch")
            if deadline is not None and self.clock() >= deadline:
                return self._save(
                    command,
                    CommandResult(
                        command.command_id,
                        "refused",
                        "attempt-deadline-passed",
                        "the Attempt's accepted-work deadline has passed",
                    ),
                )
        try:
            credential = await self._credential(att)
            await self._ensure_submitted(att, "stage-in", None, credential)
        except SlurmRefused as refused:
            return self._save(
                command,
                CommandResult(
                    command.command_id,
                    "refused",
                    refused.code,
                    _refusal_text(refused.code),
                ),
            )
        except DeadlinePassed:
            return self._save(
                command,
                CommandResult(
                    command.command_id,
                    "refused",
                    "attempt-deadline-passed",
                    "the Attempt's accepted-work deadline has passed",
                ),
            )
        except MemberTokenRejected as rejected:
            log.warning("attempt %s: member token rejected (%s)", att.attempt_id, rejected.reason)
            return self._save(
                command,
                CommandResult(
                    command.command_id,
                    "refused",
                    "member-token-rejected",
                    f"the member token was refused ({rejected.reason})",
                ),
            )
        att = self._attempt(att.attempt_id)
        return self._save(
            command,
            CommandResult(
                command.command_id,
                "succeeded",
                native_jobs=self._native_jobs(att.attempt_id),
                observation=self._observation(
                    att, "queued", native_state=self._native_state(att.attempt_id)
                ),
            ),
        )

    async def observe(self, command: SiteCommand) -> CommandResult:
        """Observe the chain, submit the next stage when its predecessor completed.

        Phases: ``queued`` (stage-in, compute pending), ``running`` (compute
        started, stage-out; never back), ``succeeded``/``failed``/``cancelled``
        once decided and cleaned up.  One native list request serves every
        Attempt observed within the list cache time.
        """
        return await self.commands.run("observe", command)

    async def _observe(self, command: SiteCommand) -> CommandResult:
        return await self._observe_locked(command, self._attempt(command.attempt_id))

    async def cancel(self, command: SiteCommand) -> CommandResult:
        """Cancel the whole chain, newest job first; the exact result is saved and replayed.

        ``message`` is ``accepted``, ``already-terminal`` or ``not-found``.
        """
        return await self.commands.run("cancel", command)

    async def _cancel(self, command: SiteCommand) -> CommandResult:
        att = self.journal.attempt(command.attempt_id)
        if att is None:
            return self._save(
                command, CommandResult(command.command_id, "succeeded", message="not-found")
            )
        if att.cancel_result is not None:
            return self._save(command, self._cancel_result(command, att))
        if att.cancel_state is None:
            self.journal.update_attempt(att.attempt_id, cancel_state="requested")
        self.fault("cancel-intent")
        att = self._attempt(att.attempt_id)
        result = await self._cancel_chain(att)
        self.journal.update_attempt(att.attempt_id, cancel_result=result, cancel_state="done")
        att = self._attempt(att.attempt_id)
        return self._save(command, self._cancel_result(command, att))

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

    async def _read_log(self, command: SiteCommand) -> CommandResult:
        stage = command.payload.get("stage", "compute")
        if stage not in STAGES:
            return CommandResult(command.command_id, "refused", "unknown-stage", "no such stage")

        async def read(name: str, max_bytes: int, offset: int | None) -> tuple[bytes, int, int]:
            return await asyncio.to_thread(
                read_span, self._log_path(command.attempt_id, name), max_bytes, offset
            )

        # Read permits come from the Site edge that also authorises execution.
        permits = self.authority if isinstance(self.authority, ReadPermits) else None
        try:
            return await permitted_read(command, permits, read)
        except OSError:
            return CommandResult(
                command.command_id, "refused", "workspace-unavailable", "the log cannot be read"
            )

    async def _authorise(self, run_id: str, attempt_id: str, record: dict[str, Any]) -> str | None:
        """Ask current authority for a new native effect: None, or the refusal's reason."""
        if self.authority is None:
            return None
        binding = record["binding"]
        request = {
            "run_id": run_id,
            "attempt_id": attempt_id,
            "material_digest": record.get("material_digest") or "",
            "member_id": binding.get("member") or "",
            "site_username": binding["user"],
            "account": binding["account"],
        }
        try:
            await self.authority.authorise_execution(request)
        except EdgeUnavailable:
            raise Deferred("authority-unavailable", "authorisation cannot be confirmed") from None
        except EdgeRefused as error:
            return f"authority refused ({error.code})"
        return None


def _refusal_text(code: str | None) -> str:
    """Who refused the stage-in job: slurmctld (``slurm-error-<n>``) or the edge, which
    refused its repository grant (:class:`~.slurm_grants.GrantRefused`)."""
    if code and code.startswith("slurm-error-"):
        return "Slurm refused the stage-in job"
    return f"the Site edge refused the stage-in job's repository grant ({code})"
