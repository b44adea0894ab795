"""Releasing the local executor's repository grants in batches (docs/site-runtime.md, Local executor: each staging
job's repository access is revoked after it ends; ADR 0014).

A stage that ends leaves its grant id in the journal with ``grant_released = 0``; the
supervision pass calls :meth:`GrantReleases.flush_when_due`, which sends every such
grant (up to :data:`BATCH`) in one ``POST /v1/repository-grants/revocations`` at most
``delay_seconds`` after the first one became due. Under load that is one request for
the releases of a second instead of one per stage (two per Run); alone, a release
waits at most ``delay_seconds``. The journal is the queue, so a restart or a failed
request loses nothing: the next flush sends them again (an unknown or already
revoked grant counts as released).
"""

from __future__ import annotations

import asyncio
import logging

from site_runtime.adaptors.local.jobs import LocalJobsJournal
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.site_access import RepositoryGrants, release_each

log = logging.getLogger(__name__)

#: Grants named in one revocation request (the edge takes at most 100).
BATCH = 100
#: Seconds before a flush that failed (edge unreachable) is tried again.
RETRY_SECONDS = 5.0


class GrantReleases:
    """Batches the releases recorded in ``journal`` through ``grants``.

    ``delay_seconds`` (≥ 0) bounds how long a release waits for others to join it.
    Uses ``grants.release_many`` when the port has it, else one ``release`` per grant.
    Never raises from :meth:`flush_when_due` or :meth:`flush`: failures are logged and
    retried.
    """

    def __init__(
        self, journal: LocalJobsJournal, grants: RepositoryGrants, *, delay_seconds: float = 1.0
    ) -> None:
        self.journal = journal
        self.grants = grants
        self.delay_seconds = max(0.0, delay_seconds)
        self._due: float | None = None  # loop time of the next flush; None: nothing waits

    def schedule(self) -> None:
        """A stage ended (or the Runtime started): flush within ``delay_seconds``."""
        now = asyncio.get_running_loop().time()
        due = now + self.delay_seconds
        if self._due is None or due < self._due:
            self._due = due

    async def flush_when_due(self) -> int:
        """Send the waiting releases when their time has come; return how many were
        released (0 when not due, nothing waited or the edge was unreachable)."""
        now = asyncio.get_running_loop().time()
        if self._due is None or now < self._due:
            return 0
        return await self.flush()

    async def flush_due_logged(self) -> None:
        """:meth:`flush_when_due`, any error logged, never raised: it must not end a
        supervision pass or fail an observe whose result is already decided."""
        try:
            await self.flush_when_due()
        except Exception as error:  # noqa: BLE001 - the journal keeps them for next time
            log.error("releasing repository grants failed (%s); retried later", type(error).__name__)

    async def flush(self) -> int:
        """Send every waiting release now (up to :data:`BATCH`); return how many were
        released. A refused or failed batch is retried one grant at a time, so one
        grant the edge cannot revoke does not hold back the others."""
        now = asyncio.get_running_loop().time()
        self._due = None
        pending = self.journal.unreleased_grants(BATCH)
        if not pending:
            return 0
        ids = [grant_id for _, _, grant_id in pending]
        try:
            answers = await self._release(ids)
        except (EdgeUnavailable, EdgeRefused) as error:
            answers = await self._one_by_one(ids) if len(ids) > 1 else {}
            if not answers:
                log.warning(
                    "releasing %d repository grants failed (%s); retried in %.0f s",
                    len(pending),
                    type(error).__name__,
                    RETRY_SECONDS,
                )
        released = 0
        for attempt_id, stage, grant_id in pending:
            answer = answers.get(grant_id)
            if answer is None:
                continue  # not answered: stays for the next flush
            if answer == "forbidden":
                # Another stream's grant can never be released from here: stop asking.
                log.warning("attempt %s: the %s grant is not this Site's", attempt_id, stage)
            self.journal.grant_released(attempt_id, stage)
            released += 1
        if len(pending) == BATCH and released == len(pending):
            self._later(now)  # more wait: go on at the next pass
        elif released < len(pending):
            self._later(now + RETRY_SECONDS)
        return released

    def _later(self, due: float) -> None:
        # A stage that ended during the request scheduled an earlier flush: keep it.
        self._due = due if self._due is None else min(self._due, due)

    async def _one_by_one(self, grant_ids: list[str]) -> dict[str, str]:
        """Each grant alone: one the edge refuses or fails on (e.g. its provider cannot
        revoke it) stays and the others go on; two failures in a row mean the edge is
        down, and the rest wait for the next flush."""
        answers: dict[str, str] = {}
        failures_in_a_row = 0
        for grant_id in grant_ids:
            try:
                answers.update(await self._release([grant_id]))
            except EdgeRefused:
                failures_in_a_row = 0
                continue  # this one stays; the others go on
            except EdgeUnavailable:
                failures_in_a_row += 1
                if failures_in_a_row >= 2:
                    break
                continue
            failures_in_a_row = 0
        return answers

    async def _release(self, grant_ids: list[str]) -> dict[str, str]:
        release_many = getattr(self.grants, "release_many", None)
        if release_many is not None:
            return await release_many(grant_ids)
        return await release_each(self.grants.release, grant_ids)
