"""Bringing a stage to ``submitted`` (seed 000, Recovery; seed 001, refusals and deferrals).

Every stage moves ``prepared`` → ``submitting`` (intent and exact request saved
before the POST) → ``held`` (job id saved) → ``submitted`` (released).  A
submission whose answer was lost is settled by an exact-identity lookup: a held
job with the stage's name, comment, account and user is adopted; several stop
progress; none in slurmctld means the POST never created a job, and the stage
goes back to ``prepared``.  A definite refusal is saved with its code; a limited
or unreachable slurmrestd created nothing and defers.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from metallo.identity.verify import JwksUnavailable, MemberCredential, MemberTokenRejected
from site_runtime.adaptors.slurm_access import (
    SlurmLimited,
    SlurmRefused,
    SlurmUncertain,
    SlurmUnreachable,
)
from site_runtime.adaptors.slurm_edge import EdgeRefused, EdgeUnavailable
from site_runtime.adaptors.slurm_grants import ChainGrants, GrantRefused
from site_runtime.adaptors.slurm_journal import AttemptRow, StageRow
from site_runtime.adaptors.slurm_rendering import ChainRendering
from site_runtime.application.ports import Deferred

log = logging.getLogger("metallo.site_runtime.slurm")


class DeadlinePassed(Exception):
    """The accepted-work deadline passed just before a fresh submission."""


def _slurm_time(now: float) -> str:
    """A UTC time as slurmdbd's query parser takes it (no zone suffix)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S")


class ChainSubmission(ChainGrants, ChainRendering):
    """Submit a stage held, save its id, release it; settle uncertain submissions."""

    async def _credential(self, att: AttemptRow) -> MemberCredential:
        try:
            return await self.tokens.member_token(att.attempt_id)
        except EdgeUnavailable as error:
            raise Deferred(error.code, "no member token now") from None
        except EdgeRefused as error:
            raise Deferred(
                "identity-provider-unavailable", f"member token refused ({error.code})"
            ) from None

    async def _ensure_submitted(
        self, att: AttemptRow, stage: str, after: str | None, credential: MemberCredential
    ) -> str:
        """Bring ``stage`` to ``submitted`` (released) and return its job id."""
        try:
            return await self._submit_steps(att, stage, after, credential)
        except JwksUnavailable:
            raise Deferred(
                "identity-provider-unavailable", "the issuer's keys are unavailable"
            ) from None
        except SlurmUnreachable:
            raise Deferred("slurm-unavailable", "slurmrestd refused the connection") from None
        except SlurmUncertain:
            raise Deferred(
                "slurm-observation-unavailable", "Slurm could not be asked now"
            ) from None

    async def _submit_steps(
        self, att: AttemptRow, stage: str, after: str | None, credential: MemberCredential
    ) -> str:
        user = att.record["binding"]["user"]
        row = self.journal.stages(att.attempt_id)[stage]
        if row.state == "submitting":
            row = await self._settle_uncertain(att, row, credential)
        if row.state == "prepared":
            row = await self._post(att, stage, after, credential)
        if row.state == "held":
            await self.rest.release(row.job_id, credential=credential, user=user)
            self.journal.update_stage(att.attempt_id, stage, state="submitted")
            row = self.journal.stages(att.attempt_id)[stage]
        if row.state != "submitted" or row.job_id is None:
            raise Deferred("slurm-observation-unavailable", "the stage is not submitted yet")
        return row.job_id

    async def _post(
        self, att: AttemptRow, stage: str, after: str | None, credential: MemberCredential
    ) -> StageRow:
        user = att.record["binding"]["user"]
        # Rendered first: a record this Runtime cannot render (UnknownScriptVersion)
        # must not leave a repository grant issued for nothing.
        request = self._render(att, stage, after)
        secret_env: dict[str, str] = {}
        if stage in ("stage-in", "stage-out"):
            try:
                grant = await self._grant(att, stage)
            except GrantRefused as refused:
                self.journal.update_stage(
                    att.attempt_id, stage, state="refused", refusal={"code": refused.code}
                )
                raise
            secret_env = {
                "METALLO_GIT_USERNAME": grant.username,
                "METALLO_GIT_PASSWORD": grant.token,
            }
        # A local SQLite write (well under a millisecond) blocks the loop less than a
        # hand-off to a worker thread costs.
        self.journal.update_stage(att.attempt_id, stage, state="submitting", request=request)
        self.fault(f"intent:{stage}")

        def deadline_check() -> None:
            deadline = att.record.get("deadline_epoch")
            if (
                stage in ("stage-in", "compute")
                and deadline is not None
                and self.clock() >= deadline
            ):
                raise DeadlinePassed()

        try:
            submitted = await self.rest.submit(
                script=request["script"],
                job=request["job"],
                secret_environment=secret_env,
                credential=credential,
                user=user,
                before_post=deadline_check,
            )
        except DeadlinePassed:
            self.journal.update_stage(att.attempt_id, stage, state="prepared")
            await self._release_grant(att.attempt_id, stage)
            raise
        except SlurmRefused as refused:
            self.journal.update_stage(
                att.attempt_id,
                stage,
                state="refused",
                refusal={"code": refused.code, "error_number": refused.error_number},
            )
            await self._release_grant(att.attempt_id, stage)
            raise
        except (SlurmLimited, SlurmUnreachable) as error:
            # Nothing was created: the stage goes back to prepared (seed 001).
            self.journal.update_stage(att.attempt_id, stage, state="prepared")
            await self._release_grant(att.attempt_id, stage)
            raise Deferred(error.code, "the stage will be submitted again") from None
        except (MemberTokenRejected, JwksUnavailable):
            self.journal.update_stage(att.attempt_id, stage, state="prepared")
            raise
        self.fault(f"posted:{stage}")
        self.journal.update_stage(att.attempt_id, stage, state="held", job_id=submitted.job_id)
        self.fault(f"held:{stage}")
        return self.journal.stages(att.attempt_id)[stage]

    async def _settle_uncertain(
        self, att: AttemptRow, row: StageRow, credential: MemberCredential
    ) -> StageRow:
        """Adopt a held job with the exact identity, or prove the POST created nothing."""
        user = att.record["binding"]["user"]
        identity = self._identity(att, row.stage)
        since = _slurm_time(att.created_at - 86400)
        matches = await self.rest.find(identity, since_iso=since, credential=credential, user=user)
        if len(matches) > 1:
            held = [m for m in matches if m.state == "PENDING" and not m.terminal]
            if len(held) == len(matches):
                # Only held duplicates (never released, never ran): keep the oldest.
                keep = min(matches, key=lambda m: int(m.job_id))
                for extra in matches:
                    if extra.job_id != keep.job_id:
                        await self.rest.cancel(extra.job_id, credential=credential, user=user)
                matches = [keep]
            else:
                log.error(
                    "attempt %s %s: %d jobs carry its identity; progress stops",
                    att.attempt_id,
                    row.stage,
                    len(matches),
                )
                raise Deferred(
                    "slurm-observation-unavailable", "several jobs carry the stage's identity"
                )
        if len(matches) == 1:
            job = matches[0]
            state = (
                "held" if job.state == "PENDING" and job.reason == "JobHeldUser" else "submitted"
            )
            self.journal.update_stage(att.attempt_id, row.stage, state=state, job_id=job.job_id)
            log.info(
                "attempt %s %s: adopted job %s by exact identity",
                att.attempt_id,
                row.stage,
                job.job_id,
            )
        else:
            # slurmctld keeps every held job until it is released or cancelled, and we
            # release only after saving the id: no job means the POST created nothing.
            self.journal.update_stage(att.attempt_id, row.stage, state="prepared")
            await self._release_grant(att.attempt_id, row.stage)
        return self.journal.stages(att.attempt_id)[row.stage]
