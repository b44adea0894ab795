"""Just-in-time repository grants for the staging jobs (seed 000).

A grant is issued right before its staging job is posted and lives only in
memory; the journal keeps only its id and progress (``none`` → ``requested`` →
``issued`` → ``released``).  It is released when its job has ended, when the
POST created nothing, and with the Attempt's cleanup; a release that cannot be
made now stays ``issued`` and is retried.
"""

from __future__ import annotations

from site_runtime.adaptors.slurm_access import SlurmAccessError, SlurmRefused
from site_runtime.adaptors.slurm_chain_base import ChainBase
from site_runtime.adaptors.slurm_edge import EdgeRefused, EdgeUnavailable, RepositoryGrant
from site_runtime.adaptors.slurm_journal import AttemptRow
from site_runtime.application.ports import Deferred


class GrantRefused(SlurmRefused):
    """The edge refused a staging job's repository grant for good, with a code of its
    own (e.g. 409 ``repository-not-served`` for a repository the Site's Git server does
    not serve): nothing was submitted, and the stage is refused with the edge's code,
    exactly like a job slurmctld refused. A 4xx without the edge's code (``edge-refused``:
    a proxy in front of it, say, during a deploy) stays a deferral. A deferral would hold the Site's whole ordered
    stream behind a start that can never succeed (a new user's report)."""

    def __init__(self, code: str) -> None:
        SlurmAccessError.__init__(self, f"the repository grant was refused ({code})")
        self.error_number = None
        self.code = code


class ChainGrants(ChainBase):
    """Issue and release a staging stage's repository grant."""

    async def _grant(self, att: AttemptRow, stage: str) -> RepositoryGrant:
        row = self.journal.stages(att.attempt_id)[stage]
        if row.grant_state in ("requested", "issued"):
            await self._release_grant(att.attempt_id, stage)
        self.journal.update_stage(att.attempt_id, stage, grant_state="requested", grant_id=None)
        direction = "stage-in" if stage == "stage-in" else "stage-out"
        try:
            grant = await self.grants.issue(att.attempt_id, direction)
        except EdgeUnavailable as error:
            self.journal.update_stage(att.attempt_id, stage, grant_state="none")
            raise Deferred(error.code, "no repository grant now") from None
        except EdgeRefused as error:
            self.journal.update_stage(att.attempt_id, stage, grant_state="none")
            if error.code == "edge-refused":  # not the edge's own answer: may pass
                raise Deferred(
                    "repository-unavailable", f"repository grant refused ({error.code})"
                ) from None
            raise GrantRefused(error.code) from None
        self.journal.update_stage(
            att.attempt_id, stage, grant_state="issued", grant_id=grant.grant_id
        )
        self._grant_tokens[(att.attempt_id, stage)] = grant
        return grant

    async def _release_grant(self, attempt_id: str, stage: str) -> None:
        row = self.journal.stages(attempt_id)[stage]
        self._grant_tokens.pop((attempt_id, stage), None)
        if row.grant_state == "issued" and row.grant_id:
            try:
                await self.grants.release(row.grant_id)
            except (EdgeUnavailable, EdgeRefused):
                return  # stays "issued"; retried with the Attempt's cleanup
            self.journal.update_stage(attempt_id, stage, grant_state="released")
        elif row.grant_state == "requested":
            # Issued or not, its id was never saved; it expires on its own.
            self.journal.update_stage(attempt_id, stage, grant_state="released")
