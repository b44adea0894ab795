"""Whole-chain cancellation, newest job first (seed 000, Cancellation).

An uncertain submission is settled first, so no job of the chain is missed;
then every live job is cancelled from stage-out back to stage-in.  The answer is
``accepted``, ``already-terminal`` or ``not-found``; a job Slurm no longer
knows is looked up in accounting, since a 404 plus an empty accounting page is
not proof of absence.
"""

from __future__ import annotations

from metallo.identity.verify import JwksUnavailable, MemberTokenRejected
from site_runtime.adaptors.slurm_access import SlurmUncertain, SlurmUnreachable
from site_runtime.adaptors.slurm_chain_base import native_facts
from site_runtime.adaptors.slurm_job_model import STAGES
from site_runtime.adaptors.slurm_journal import AttemptRow
from site_runtime.adaptors.slurm_submission import ChainSubmission
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand


class ChainCancellation(ChainSubmission):
    """Cancel every job of the chain and build the cancel command's result."""

    async def _cancel_chain(self, att: AttemptRow) -> str:
        user = att.record["binding"]["user"]
        try:
            credential = await self._credential(att)
            stages = self.journal.stages(att.attempt_id)
            for row in stages.values():
                if row.state == "submitting":
                    await self._settle_uncertain(att, row, credential)
            stages = self.journal.stages(att.attempt_id)
            answers = []
            for stage in reversed(STAGES):
                row = stages[stage]
                if row.job_id is None:
                    continue
                if (row.native or {}).get("terminal"):
                    answers.append("already-terminal")
                    continue
                answer = await self.rest.cancel(row.job_id, credential=credential, user=user)
                self.fault(f"cancelled:{stage}")
                if answer == "already-terminal":
                    # Cancelled by an earlier, interrupted run of this same cancellation?
                    live = {
                        j.job_id: j
                        for j in await self.rest.list_jobs(credential=credential, user=user)
                    }
                    job = live.get(row.job_id) or await self.rest.accounting_job(
                        row.job_id, credential=credential, user=user
                    )
                    if job is not None and job.state == "CANCELLED":
                        answer = "accepted"
                if answer == "not-found":
                    job = await self.rest.accounting_job(
                        row.job_id, credential=credential, user=user
                    )
                    if job is None:
                        # 404 plus an empty accounting page is not proof of absence.
                        raise Deferred(
                            "slurm-observation-unavailable", "the job is not visible yet"
                        )
                    self.journal.update_stage(att.attempt_id, stage, native=native_facts(job))
                    answer = "already-terminal" if job.terminal else "accepted"
                answers.append(answer)
        except (MemberTokenRejected, JwksUnavailable):
            raise Deferred(
                "identity-provider-unavailable", "the member token cannot be used"
            ) from None
        except SlurmUnreachable:
            raise Deferred("slurm-unavailable", "slurmrestd refused the connection") from None
        except SlurmUncertain:
            raise Deferred(
                "slurm-observation-unavailable", "Slurm could not be asked now"
            ) from None
        if "accepted" in answers:
            return "accepted"
        if answers:
            return "already-terminal"
        return "not-found"

    def _cancel_result(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        phase = (att.outcome or {}).get("phase") or "cancelled"
        observation = att.outcome or self._observation(att, phase, native_state="CANCELLED")
        return CommandResult(
            command.command_id,
            "succeeded",
            message=att.cancel_result,
            native_jobs=self._native_jobs(att.attempt_id),
            observation=observation,
        )
