"""Just-in-time repository grants for the staging jobs (docs/site-runtime.md, Slurm
executor).

A grant is issued right before its staging job is posted and lives only in
memory; the journal keeps only its id and progress (``none`` → ``requested`` →
``issued`` → ``released``). It is released when its job has ended, when the
POST created nothing, and with the Attempt's cleanup; a release that cannot be
made now stays ``issued`` and is retried.
"""

from __future__ import annotations

from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal
from site_runtime.adaptors.slurm.rest import SlurmAccessError, SlurmRefused
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.ports import Deferred
from site_runtime.application.site_access import RepositoryGrant, RepositoryGrants, definite


class GrantRefused(SlurmRefused):
    """The edge refused a staging job's repository grant for good, with a code of its
    own (e.g. 409 ``repository-not-served``): nothing was submitted, and the stage is
    refused with the edge's code, exactly like a job slurmctld refused. A refusal
    without the edge's own code (``edge-refused``: a proxy in front of it during a
    deploy) or one that may pass (401, 429) stays a deferral — but a deferral for
    good would hold the Site's whole ordered stream behind a start that can never
    succeed, so a definite refusal fails the stage."""

    def __init__(self, code: str) -> None:
        SlurmAccessError.__init__(self, f"the repository grant was refused ({code})")
        self.error_number = None
        self.code = code


class StageGrants:
    """Issue and release a staging stage's repository grant (see the module doc)."""

    def __init__(self, journal: SlurmJournal, grants: RepositoryGrants) -> None:
        self.journal = journal
        self.grants = grants
        # Grants live only in memory, for the submission that uses them.
        self._issued: dict[tuple[str, str], RepositoryGrant] = {}

    async def issue(self, att: AttemptRow, stage: str) -> RepositoryGrant:
        """A fresh grant for ``stage`` (any earlier one is released first).

        Raises :class:`GrantRefused` for the edge's definite refusal and
        :class:`Deferred` (``repository-unavailable`` or the edge's code) otherwise.
        """
        row = self.journal.stages(att.attempt_id)[stage]
        if row.grant_state in ("requested", "issued"):
            await self.release(att.attempt_id, stage)
        self.journal.update_stage(att.attempt_id, stage, grant_state="requested", grant_id=None)
        try:
            grant = await self.grants.issue(att.attempt_id, stage)
        except EdgeUnavailable as error:
            self.journal.update_stage(att.attempt_id, stage, grant_state="none")
            raise Deferred(error.code, "no repository grant now") from None
        except EdgeRefused as error:
            self.journal.update_stage(att.attempt_id, stage, grant_state="none")
            if error.code == "edge-refused" or not definite(error):
                raise Deferred(
                    "repository-unavailable", f"repository grant refused ({error.code})"
                ) from None
            raise GrantRefused(error.code) from None
        self.journal.update_stage(
            att.attempt_id, stage, grant_state="issued", grant_id=grant.grant_id
        )
        self._issued[(att.attempt_id, stage)] = grant
        return grant

    async def release(self, attempt_id: str, stage: str) -> None:
        """Revoke ``stage``'s grant; one that cannot be released now stays ``issued``."""
        row = self.journal.stages(attempt_id)[stage]
        self._issued.pop((attempt_id, stage), None)
        if row.grant_state == "issued" and row.grant_id:
            try:
                await self.grants.release(row.grant_id)
            except (EdgeUnavailable, EdgeRefused):
                return  # stays "issued"; retried with the Attempt's cleanup
            self.journal.update_stage(attempt_id, stage, grant_state="released")
        elif row.grant_state == "requested":
            # Issued or not, its id was never saved; it expires on its own.
            self.journal.update_stage(attempt_id, stage, grant_state="released")
