"""Durable cleanup of ended Kubernetes Attempts (docs/site-runtime.md, Kubernetes: Cleanup).

For an Attempt that ended (or whose prepare or start was refused):

1. every stage's repository grant is revoked at the edge;
2. the helper Pods and the grant Secrets are deleted (exact uid, confirmed);
3. once ``cleanup_due`` has passed (the retention setting; at once for a refused
   Attempt) the Job and the workspace PVC are deleted too.

Each deletion tombstones its role in ``jobs.sqlite``, so a retry or restart never
recreates an object. Anything the API or the edge cannot do now stays in the journal
and is tried again by the next supervision pass: cleanup is deferred, never lost.
"""

from __future__ import annotations

import logging
import time

from site_runtime.adaptors.kubernetes.journal import KubernetesJournal
from site_runtime.adaptors.kubernetes.objects import NativeObjects, identity_of
from site_runtime.adaptors.kubernetes.stages import StageDriver
from site_runtime.application.ports import Deferred

log = logging.getLogger("site_runtime.kubernetes")
EARLY = ("stage-in-secret", "stage-out-secret", "stage-in", "stage-out")
RETAINED = ("compute", "workspace")


class Cleanup:
    """Cleans up ended Attempts (see the module doc)."""

    def __init__(
        self, journal: KubernetesJournal, objects: NativeObjects, stages: StageDriver, site_id: str
    ) -> None:
        self.journal = journal
        self.objects = objects
        self.stages = stages
        self.site_id = site_id

    async def attempt(self, attempt_id: str, *, now: float | None = None) -> bool:
        """Clean up what is due for one Attempt; True when nothing is left to do.
        Raises Deferred when the API cannot confirm a deletion now."""
        row = self.journal.attempt(attempt_id)
        if row is None or row.state not in ("succeeded", "failed", "cancelled", "refused"):
            return False
        now = time.time() if now is None else now
        identity = identity_of(row, self.site_id)
        for obj in self.journal.objects(attempt_id):
            if obj.grant_id and not obj.grant_released:
                await self.stages.release(attempt_id, obj.role, obj.grant_id)
        for role in EARLY:
            await self.objects.delete(row, role, identity)
        if row.cleanup_due is not None and row.cleanup_due <= now:
            for role in RETAINED:
                await self.objects.delete(row, role, identity)
        left = [
            o
            for o in self.journal.objects(attempt_id)
            if o.state != "deleted" or (o.grant_id and not o.grant_released)
        ]
        return not left

    async def pass_(self) -> None:
        """One pass over every Attempt with cleanup pending (errors are logged, kept)."""
        for attempt_id in self.journal.cleanup_pending():
            try:
                await self.attempt(attempt_id)
            except Deferred as error:
                log.info("attempt %s: cleanup deferred (%s)", attempt_id, error.code)
            except Exception as error:  # noqa: BLE001 - one Attempt must not stop the others
                log.error(
                    "attempt %s: cleanup failed (%s); retried later",
                    attempt_id,
                    type(error).__name__,
                )
