"""Bringing a stage to ``submitted`` (docs/site-runtime.md, Recovery).

Every stage moves ``prepared`` → ``submitting`` (intent and exact request saved
before the POST) → ``held`` (job id saved) → ``submitted`` (released). A
submission whose answer was lost is settled by an exact-identity lookup
(:func:`~site_runtime.domain.slurm_settling.settle_submission`). A definite
refusal is saved with its code; a limited or unreachable slurmrestd created
nothing and defers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from metallo.identity.verify import JwksUnavailable, MemberCredential, MemberTokenRejected
from site_runtime.adaptors.slurm.errors import deferring
from site_runtime.adaptors.slurm.grants import GrantRefused, StageGrants
from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal, StageRow
from site_runtime.adaptors.slurm.rest import (
    SlurmJobRequeueable,
    SlurmLimited,
    SlurmRefused,
    SlurmRest,
    SlurmUnreachable,
)
from site_runtime.adaptors.slurm.scripts import scripts_for
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.ports import Deferred
from site_runtime.application.site_access import MemberTokens
from site_runtime.domain import slurm_requests
from site_runtime.domain.consent import permanent_reason
from site_runtime.domain.slurm_array_start import task_log_path
from site_runtime.domain.slurm_arrays import array_identity
from site_runtime.domain.slurm_chain import deadline_refuses
from site_runtime.domain.slurm_jobs import NativeIdentity
from site_runtime.domain.slurm_settling import settle_submission
from site_runtime.domain.slurm_stages import STAGING_STAGES

log = logging.getLogger("metallo.site_runtime.slurm")


class DeadlinePassed(Exception):
    """The accepted-work deadline passed just before a fresh submission."""


class ConsentRefused(Exception):
    """The member-token owner refused the Attempt's token for good
    (:func:`~site_runtime.domain.consent.permanent_reason`); ``reason`` is its code."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _slurm_time(now: float) -> str:
    """A UTC time as slurmdbd's query parser takes it (no zone suffix)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def identity(att: AttemptRow, stage: str) -> NativeIdentity:
    """The exact native identity of ``stage`` of ``att``: its own job's, or for a child
    submitted in an array group (``record["array"]``) the group's array of ``stage``."""
    array = att.record.get("array")
    if array:
        b = att.record["binding"]
        return array_identity(
            att.record["prefix"], array["group_id"], stage, b["account"], b["user"]
        )
    return slurm_requests.identity(att.record, att.run_id, att.attempt_id, stage)


def log_path(att: AttemptRow, stage: str) -> Path:
    """The Attempt-scoped log of ``stage`` (a child of an array group: its task's log)."""
    root = att.record["workspace_root"]
    array = att.record.get("array")
    if array:
        return Path(
            task_log_path(root, att.record["prefix"], array["group_id"], stage, array["index"])
        )
    return Path(slurm_requests.log_path(root, att.attempt_id, stage))


class StageSubmissions:
    """Submit a stage held, save its id, release it; settle uncertain submissions.

    ``fault`` is called at ``intent:<stage>``, ``posted:<stage>`` and
    ``held:<stage>``, the points a restart must recover from.
    """

    def __init__(
        self,
        *,
        journal: SlurmJournal,
        rest: SlurmRest,
        tokens: MemberTokens,
        grants: StageGrants,
        clock: Callable[[], float] = time.time,
        fault: Callable[[str], None] = lambda step: None,
    ) -> None:
        self.journal = journal
        self.rest = rest
        self.tokens = tokens
        self.grants = grants
        self.clock = clock
        self.fault = fault

    async def credential(self, att: AttemptRow) -> MemberCredential:
        """The member token for ``att``. Raises ConsentRefused when the edge refused it
        for good, Deferred when it cannot give one now (a temporary refusal included)."""
        try:
            return await self.tokens.member_token(att.attempt_id)
        except EdgeUnavailable as error:
            raise Deferred(error.code, "no member token now") from None
        except EdgeRefused as error:
            reason = permanent_reason(error.status, error.code, error.reason)
            if reason is not None:
                log.warning("attempt %s: member token refused for good (%s)", att.attempt_id, reason)
                raise ConsentRefused(reason) from None
            raise Deferred(
                "identity-provider-unavailable", f"member token refused ({error.code})"
            ) from None

    def render(self, att: AttemptRow, stage: str, after: str | None) -> dict[str, Any]:
        """The exact request of ``stage`` (no credentials). Raises
        :class:`~site_runtime.adaptors.slurm.scripts.UnknownScriptVersion` for a
        version this Runtime does not have."""
        script = scripts_for(att.record.get("script_version", 1))[stage]
        return slurm_requests.stage_request(
            att.record,
            run_id=att.run_id,
            attempt_id=att.attempt_id,
            attempt_number=att.attempt_number,
            stage=stage,
            after=after,
            script=script,
        )

    async def ensure_submitted(
        self, att: AttemptRow, stage: str, after: str | None, credential: MemberCredential
    ) -> str:
        """Bring ``stage`` to ``submitted`` (released) and return its job id.

        Raises SlurmRefused (saved as the stage's refusal), DeadlinePassed,
        MemberTokenRejected, and Deferred for everything that may pass.
        """
        with deferring(att.attempt_id, token_rejection=False):
            user = att.record["binding"]["user"]
            row = self.journal.stages(att.attempt_id)[stage]
            if row.state == "submitting":
                row = await self.settle(att, row, credential)
            if row.state == "prepared":
                row = await self.post(att, stage, after, credential)
            if row.state == "held":
                await self.refuse_requeueable(att, row, credential)
                await self.rest.release(row.job_id, credential=credential, user=user)
                self.journal.update_stage(att.attempt_id, stage, state="submitted")
                row = self.journal.stages(att.attempt_id)[stage]
            if row.state != "submitted" or row.job_id is None:
                raise Deferred("slurm-observation-unavailable", "the stage is not submitted yet")
            return row.job_id

    async def refuse_requeueable(
        self, att: AttemptRow, row: StageRow, credential: MemberCredential
    ) -> None:
        """Before release: read the held job's record; a job slurmctld may requeue
        (Slurm would re-run Metallo's work) is cancelled, its stage refused
        ``slurm-job-requeueable``, and SlurmJobRequeueable raised."""
        user = att.record["binding"]["user"]
        assert row.job_id is not None
        job = await self.rest.job(row.job_id, credential=credential, user=user)
        if job is None or job.requeue is not True:
            return
        log.error(
            "attempt %s %s: job %s is requeueable; cancelled", att.attempt_id, row.stage, row.job_id
        )
        await self.rest.cancel(row.job_id, credential=credential, user=user)
        refused = SlurmJobRequeueable()
        self.journal.update_stage(
            att.attempt_id, row.stage, state="refused", refusal={"code": refused.code}
        )
        await self.grants.release(att.attempt_id, row.stage)
        raise refused

    async def post(
        self, att: AttemptRow, stage: str, after: str | None, credential: MemberCredential
    ) -> StageRow:
        """Save the intent and exact request, POST the job held, save its id."""
        user = att.record["binding"]["user"]
        # Rendered first: a record this Runtime cannot render (UnknownScriptVersion)
        # must not leave a repository grant issued for nothing.
        request = self.render(att, stage, after)
        secret_env: dict[str, str] = {}
        if stage in STAGING_STAGES:
            try:
                grant = await self.grants.issue(att, stage)
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
            if deadline_refuses(stage, att.record.get("deadline_epoch"), self.clock()):
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
            await self.grants.release(att.attempt_id, stage)
            raise
        except SlurmRefused as refused:
            self.journal.update_stage(
                att.attempt_id,
                stage,
                state="refused",
                refusal={"code": refused.code, "error_number": refused.error_number},
            )
            await self.grants.release(att.attempt_id, stage)
            raise
        except (SlurmLimited, SlurmUnreachable) as error:
            # Nothing was created: the stage goes back to prepared and is sent again.
            self.journal.update_stage(att.attempt_id, stage, state="prepared")
            await self.grants.release(att.attempt_id, stage)
            raise Deferred(error.code, "the stage will be submitted again") from None
        except (MemberTokenRejected, JwksUnavailable):
            self.journal.update_stage(att.attempt_id, stage, state="prepared")
            raise
        self.fault(f"posted:{stage}")
        self.journal.update_stage(att.attempt_id, stage, state="held", job_id=submitted.job_id)
        self.fault(f"held:{stage}")
        return self.journal.stages(att.attempt_id)[stage]

    async def settle(
        self, att: AttemptRow, row: StageRow, credential: MemberCredential
    ) -> StageRow:
        """Adopt the job with the stage's exact identity, or prove the POST created none."""
        user = att.record["binding"]["user"]
        since = _slurm_time(att.created_at - 86400)
        matches = await self.rest.find(
            identity(att, row.stage), since_iso=since, credential=credential, user=user
        )
        settlement = settle_submission(matches)
        if settlement.verdict == "ambiguous":
            log.error(
                "attempt %s %s: %d jobs carry its identity; progress stops",
                att.attempt_id,
                row.stage,
                len(matches),
            )
            raise Deferred(
                "slurm-observation-unavailable", "several jobs carry the stage's identity"
            )
        for extra in settlement.cancel:
            await self.rest.cancel(extra, credential=credential, user=user)
        if settlement.verdict == "adopt" and settlement.job is not None:
            state = "held" if settlement.held else "submitted"
            job_id = settlement.job.job_id
            self.journal.update_stage(att.attempt_id, row.stage, state=state, job_id=job_id)
            log.info(
                "attempt %s %s: adopted job %s by exact identity", att.attempt_id, row.stage, job_id
            )
        else:
            self.journal.update_stage(att.attempt_id, row.stage, state="prepared")
            await self.grants.release(att.attempt_id, row.stage)
        return self.journal.stages(att.attempt_id)[row.stage]
