"""Renewing the repository grants of array tasks that have not started yet
(docs/site-runtime.md, Arrays; rules in :mod:`site_runtime.domain.grant_renewal`).

A group's staging grants are written into the task material files when its arrays
are released, but with ``%maxActive`` a later task may start hours later, after its
grant's lifetime. Each ``observe`` of an array child therefore looks at its two
staging stages: while the stage's task has not started (slurmctld reports it
``PENDING`` and its material file is still there: the loader removes the file when
the task starts) and its current grant is due (:func:`renewal_due`), it

1. reads the file (gone: the task started, nothing to renew),
2. asks the edge for a fresh grant of the same stage,
3. journals it as the stage's current grant (its predecessor ``superseded``, by id
   and expiry only, :mod:`~.array_grant_book`),
4. replaces the file atomically: the same entries with the new identity, a
   temporary file with the same owner and mode 0600, fsynced, renamed over the old.

A task that started between steps 1 and 4 read the predecessor, which is still
valid (it was renewed before its expiry): so a superseded grant is never revoked
while its task may run. It is released once its stage has ended or at the child's
cleanup, unless it is already past its expiry by then. A renewed grant that never
reached the file is revoked at once.

A definite refusal of the edge fails only this child with the edge's code (its tasks
are cancelled first, newest stage first); a temporary outage (the edge unreachable,
5xx, 401, 429, a refusal without the edge's own code) is logged and tried again at
the next ``observe``. Tokens are never logged or journaled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm.array_grant_book import TaskGrant
from site_runtime.adaptors.slurm.array_material import ArrayMaterial
from site_runtime.adaptors.slurm.journal import AttemptRow, StageRow
from site_runtime.adaptors.slurm.rest import SlurmRest
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.ports import Deferred
from site_runtime.application.site_access import RepositoryGrant, RepositoryGrants, definite
from site_runtime.domain.grant_renewal import (
    expiry_epoch,
    parse_material,
    renewal_due,
    renewed_material,
    revocation_needed,
)
from site_runtime.domain.outcomes import failure_record
from site_runtime.domain.slurm_array_start import material_bytes
from site_runtime.domain.slurm_chain import Verdict
from site_runtime.domain.slurm_stages import STAGES, STAGING_STAGES

log = logging.getLogger("metallo.site_runtime.slurm")


class RenewalRefused(Exception):
    """The edge refused a renewal for good, with its own ``code``."""

    def __init__(self, code: str) -> None:
        super().__init__(f"the repository grant's renewal was refused ({code})")
        self.code = code


class ArrayGrantRenewal:
    """Renew due grants of not-yet-started array tasks; release superseded ones."""

    def __init__(
        self,
        material: ArrayMaterial,
        grants: RepositoryGrants,
        rest: SlurmRest,
        clock: Callable[[], float],
        renew_seconds: float,
    ) -> None:
        self.material = material
        self.book = material.book
        self.grants = grants
        self.rest = rest
        self.clock = clock
        self.renew_seconds = renew_seconds

    async def renew(
        self, att: AttemptRow, stages: dict[str, StageRow], credential: MemberCredential
    ) -> Verdict | None:
        """Renew what is due for this child (module doc); the verdict that fails it
        when the edge refused a renewal for good, else None."""
        if not att.record.get("array") or att.cancel_state is not None:
            return None
        for stage in STAGING_STAGES:
            row = stages[stage]
            native = row.native or {}
            if (
                row.state != "submitted"
                or row.grant_state != "issued"
                or native.get("terminal")
                or native.get("state") not in (None, "PENDING")
            ):
                continue
            current = self.book.current(att.attempt_id, stage)
            if current is None or current.grant_id != row.grant_id:
                continue
            if not renewal_due(
                current.issued_at, current.expires_at, self.clock(), self.renew_seconds
            ):
                continue
            try:
                await self._renew(att, stage, current)
            except RenewalRefused as refused:
                log.warning(
                    "attempt %s %s: the grant's renewal was refused (%s); the child fails",
                    att.attempt_id,
                    stage,
                    refused.code,
                )
                await self._cancel_tasks(att, stages, credential)
                failure = failure_record(stage, None, row.job_id, None, None, refused.code)
                return Verdict("failed", failure=failure)
            except Deferred as deferral:
                log.warning(
                    "attempt %s %s: the grant is not renewed now (%s); tried again at the "
                    "next observe",
                    att.attempt_id,
                    stage,
                    deferral.code,
                )
        return None

    async def _renew(self, att: AttemptRow, stage: str, current: TaskGrant) -> None:
        path = self.material.task_path(att.record, stage)
        found = self.material.read_task(path)
        if found is None:
            return  # the task has started: it holds the grant it read
        data, owner = found
        try:
            entries = parse_material(data)
        except (ValueError, UnicodeDecodeError):
            raise Deferred(
                "workspace-unavailable", "an array task's material is malformed"
            ) from None
        issued_at = self.clock()
        grant = await self._issue(att.attempt_id, stage)
        self.book.renewed(
            att.attempt_id, stage, grant.grant_id, issued_at, expiry_epoch(grant.expires_at)
        )
        try:
            body = material_bytes(renewed_material(entries, grant.username, grant.token))
            self.material.replace_task(path, body, owner)
        except (Deferred, ValueError):
            # The new grant never reached the file: nobody can hold it.
            self.book.undo_renewal(att.attempt_id, stage, current)
            await self._revoke(grant.grant_id)
            raise Deferred("workspace-unavailable", "the renewed grant cannot be written") from None
        log.info(
            "attempt %s %s: repository grant %s renewed as %s (expires %s)",
            att.attempt_id,
            stage,
            current.grant_id,
            grant.grant_id,
            grant.expires_at or "?",
        )

    async def _issue(self, attempt_id: str, stage: str) -> RepositoryGrant:
        try:
            return await self.grants.issue(attempt_id, stage)
        except EdgeUnavailable as error:
            raise Deferred(error.code, "no repository grant now") from None
        except EdgeRefused as error:
            if error.code == "edge-refused" or not definite(error):
                raise Deferred("repository-unavailable", f"refused now ({error.code})") from None
            raise RenewalRefused(error.code) from None

    async def _revoke(self, grant_id: str) -> bool:
        try:
            await self.grants.release(grant_id)
        except (EdgeUnavailable, EdgeRefused):
            return False
        self.book.released(grant_id)
        return True

    async def _cancel_tasks(
        self, att: AttemptRow, stages: dict[str, StageRow], credential: MemberCredential
    ) -> None:
        user = att.record["binding"]["user"]
        for stage in reversed(STAGES):
            row = stages[stage]
            if row.job_id and not (row.native or {}).get("terminal"):
                await self.rest.cancel(row.job_id, credential=credential, user=user)

    async def release_superseded(self, attempt_id: str, stage: str | None = None) -> bool:
        """Release the superseded grants of the Attempt (of ``stage``, or all) whose
        task can no longer use them; True when none is left to release. One past its
        expiry needs no call; one the edge cannot revoke now stays for the next pass."""
        left = False
        for grant in self.book.superseded(attempt_id, stage):
            if not revocation_needed(grant.expires_at, self.clock()):
                self.book.released(grant.grant_id)
            elif not await self._revoke(grant.grant_id):
                left = True
        return not left
