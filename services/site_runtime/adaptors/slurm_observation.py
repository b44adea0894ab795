"""Observing the chain and moving it on (seed 000; seed 003, observation).

Each observation (unless cancellation was requested) first finishes any
uncertain or held submission; it then reads every stage's job from one native
list (slurmctld, then slurmdbd for a job that has left it), checks the saved
identity, cancels held duplicates, releases the grant of an ended staging job,
decides the outcome, and submits the next stage once its predecessor completed.  The first ``running`` observation is saved before it
is returned; a chain never goes back to ``queued``.
"""

from __future__ import annotations

import logging

from metallo.identity.verify import JwksUnavailable, MemberCredential, MemberTokenRejected
from site_runtime.adaptors.slurm_access import SlurmRefused, SlurmUncertain, SlurmUnreachable
from site_runtime.adaptors.slurm_chain_base import native_facts
from site_runtime.adaptors.slurm_job_model import STAGES, NativeJob
from site_runtime.adaptors.slurm_journal import AttemptRow, StageRow
from site_runtime.adaptors.slurm_outcome import ChainOutcome, failure_record
from site_runtime.adaptors.slurm_submission import ChainSubmission, DeadlinePassed
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand

log = logging.getLogger("metallo.site_runtime.slurm")


def _started(row: StageRow) -> bool:
    facts = row.native or {}
    return facts.get("state") in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED") or bool(
        facts.get("terminal")
    )


class ChainObservation(ChainSubmission, ChainOutcome):
    """Observe every stage's job and advance the chain."""

    async def _observe_locked(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        if att.outcome is not None:
            if att.cleanup_state != "done":
                await self._cleanup(att)
            return CommandResult(
                command.command_id,
                "succeeded",
                native_jobs=self._native_jobs(att.attempt_id),
                observation=att.outcome,
            )
        try:
            credential = await self._credential(att)
            return await self._advance(command, att, credential)
        except (MemberTokenRejected, JwksUnavailable) as error:
            reason = getattr(error, "reason", "keys-unavailable")
            log.warning("attempt %s: member token unusable (%s)", att.attempt_id, reason)
            raise Deferred(
                "identity-provider-unavailable", "the member token cannot be used"
            ) from None
        except SlurmUnreachable:
            raise Deferred("slurm-unavailable", "slurmrestd refused the connection") from None
        except SlurmUncertain:
            raise Deferred(
                "slurm-observation-unavailable", "Slurm could not be asked now"
            ) from None
        except SlurmRefused:
            att = self._attempt(att.attempt_id)
            return await self._finish(command, att)

    async def _advance(
        self, command: SiteCommand, att: AttemptRow, credential: MemberCredential
    ) -> CommandResult:
        user = att.record["binding"]["user"]
        stages = self.journal.stages(att.attempt_id)
        if stages["stage-in"].state in ("prepared", "refused"):
            if att.cancel_state is not None or stages["stage-in"].state == "refused":
                return await self._finish(command, att)
            # Not started yet (or its start was deferred): nothing native exists.
            return CommandResult(
                command.command_id, "succeeded", observation=self._observation(att, "prepared")
            )
        for stage in STAGES:
            row = stages[stage]
            if row.state in ("submitting", "held") and att.cancel_state is None:
                await self._ensure_submitted(
                    att, stage, self._predecessor_id(stages, stage), credential
                )
        stages = self.journal.stages(att.attempt_id)
        jobs = await self.rest.list_jobs(credential=credential, user=user)
        await self._sweep_duplicates(att, stages, jobs, credential)
        by_id = {j.job_id: j for j in jobs}
        for row in (stages[s] for s in STAGES):
            if row.job_id is None or (row.native or {}).get("terminal"):
                continue
            job = by_id.get(row.job_id)
            if job is None:
                job = await self.rest.accounting_job(row.job_id, credential=credential, user=user)
            if job is None:
                continue  # accounting lag: keep the last known state
            if not self._identity(att, row.stage).matches(job):
                log.error(
                    "attempt %s %s: job %s does not carry the saved identity",
                    att.attempt_id,
                    row.stage,
                    row.job_id,
                )
                raise Deferred(
                    "slurm-observation-unavailable", "a saved job id shows another identity"
                )
            self.journal.update_stage(att.attempt_id, row.stage, native=native_facts(job))
        att = self._attempt(att.attempt_id)
        stages = self.journal.stages(att.attempt_id)
        for stage in ("stage-in", "stage-out"):
            # A staging job's grant is revoked once the job has ended (seed 000).
            if (stages[stage].native or {}).get("terminal") and stages[
                stage
            ].grant_state == "issued":
                await self._release_grant(att.attempt_id, stage)
        decided = self._decide(att, stages)
        if decided is not None:
            return await self._finish(command, att)
        if att.cancel_state is None:
            for prev, nxt in (("stage-in", "compute"), ("compute", "stage-out")):
                p, n = stages[prev], stages[nxt]
                if (p.native or {}).get("state") == "COMPLETED" and n.state == "prepared":
                    deadline = att.record.get("deadline_epoch")
                    if nxt == "compute" and deadline is not None and self.clock() >= deadline:
                        self.journal.update_attempt(
                            att.attempt_id,
                            outcome=self._terminal(
                                att,
                                stages,
                                "failed",
                                failure=failure_record(
                                    "compute", None, None, None, None, "attempt-deadline-passed"
                                ),
                            ),
                            cleanup_state="pending",
                        )
                        return await self._finish(command, self._attempt(att.attempt_id))
                    try:
                        await self._ensure_submitted(att, nxt, p.job_id, credential)
                    except DeadlinePassed:
                        self.journal.update_attempt(
                            att.attempt_id,
                            outcome=self._terminal(
                                att,
                                stages,
                                "failed",
                                failure=failure_record(
                                    "compute", None, None, None, None, "attempt-deadline-passed"
                                ),
                            ),
                            cleanup_state="pending",
                        )
                        return await self._finish(command, self._attempt(att.attempt_id))
                    except SlurmRefused:
                        return await self._finish(command, self._attempt(att.attempt_id))
                    stages = self.journal.stages(att.attempt_id)
        att = self._attempt(att.attempt_id)
        stages = self.journal.stages(att.attempt_id)
        running = (
            att.reported_running
            or _started(stages["compute"])
            or stages["stage-out"].job_id is not None
        )
        if running and not att.reported_running:
            # The first running observation is saved before it is returned (seed 000).
            self.journal.update_attempt(att.attempt_id, reported_running=1)
            att = self._attempt(att.attempt_id)
        phase = "running" if running else "queued"
        return CommandResult(
            command.command_id,
            "succeeded",
            native_jobs=self._native_jobs(att.attempt_id),
            observation=self._observation(
                att, phase, native_state=self._native_state(att.attempt_id)
            ),
        )

    async def _sweep_duplicates(
        self,
        att: AttemptRow,
        stages: dict[str, StageRow],
        jobs: list[NativeJob],
        credential: MemberCredential,
    ) -> None:
        """Cancel held jobs that carry a stage's identity but are not its saved job."""
        user = att.record["binding"]["user"]
        for row in stages.values():
            if row.state not in ("held", "submitted"):
                continue
            identity = self._identity(att, row.stage)
            for job in jobs:
                if (
                    identity.matches(job)
                    and job.job_id != row.job_id
                    and job.state == "PENDING"
                    and job.reason == "JobHeldUser"
                ):
                    log.warning(
                        "attempt %s %s: cancelling held duplicate job %s",
                        att.attempt_id,
                        row.stage,
                        job.job_id,
                    )
                    await self.rest.cancel(job.job_id, credential=credential, user=user)

    def _predecessor_id(self, stages: dict[str, StageRow], stage: str) -> str | None:
        index = STAGES.index(stage)
        return stages[STAGES[index - 1]].job_id if index > 0 else None
