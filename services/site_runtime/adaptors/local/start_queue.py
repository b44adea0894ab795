"""Starting local Attempts when a slot is free (docs/site-runtime.md, Local executor).

At most ``max_active`` Attempts are in a stage at once. A ``start`` beyond that is
accepted and the Attempt ``waiting`` (observed as ``queued``/``PENDING``): a
deferral would hold the Site's whole ordered stream — every other Run's observe,
cancel and log read — behind that start. Waiting Attempts start oldest first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from site_runtime.adaptors.local.authorisation import EdgeAuthorisation
from site_runtime.adaptors.local.jobs import AttemptRow, LocalJobsJournal
from site_runtime.adaptors.local.settings import LocalSettings
from site_runtime.adaptors.local.supervision import TERMINAL, StageSupervision
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.ports import Deferred
from site_runtime.application.site_access import RepositoryGrant
from site_runtime.domain.local_batch import parse_job

log = logging.getLogger("site_runtime.local")


class StartQueue:
    """Slots, the waiting Attempts, and the start of stage-in (see the module doc)."""

    def __init__(
        self,
        *,
        settings: LocalSettings,
        journal: LocalJobsJournal,
        authorisation: EdgeAuthorisation,
        supervision: StageSupervision,
        lock: Callable[[str], asyncio.Lock],
        set_state: Callable[[str, str], None],
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.authorisation = authorisation
        self.supervision = supervision
        self.lock = lock
        self.set_state = set_state

    def has_slot(self) -> bool:
        """Whether fewer than ``max_active`` Attempts are in a stage now."""
        return len(self.journal.active_attempts()) < self.settings.max_active

    async def start_waiting(self) -> None:
        """Launch stage-in of ``waiting`` Attempts, oldest first, while slots are free.

        A waiting Attempt's start was answered already, so what stops it now is a
        failure of the Attempt, not a refusal: its deadline passed
        (``attempt-deadline-passed``: the deadline refuses stage-in not yet
        submitted) or authority refused it now (``authorisation-refused``). An edge that
        cannot answer leaves it waiting for the next pass. Attempts whose deadline passed
        fail at once, slot or no slot (one must not wait for ever on a full Runtime)."""
        now = datetime.now(UTC)
        waiting = self.journal.waiting_attempts()
        for attempt_id in waiting:
            row = self.journal.attempt(attempt_id)
            if row is not None and parse_job(row.material).deadline_passed(now):
                async with self.lock(attempt_id):
                    row = self.journal.attempt(attempt_id)
                    if row is not None and row.state == "waiting" and row.cancel_result is None:
                        log.info("attempt %s: its deadline passed while it waited", attempt_id)
                        self.fail_before_stage_in(row, "attempt-deadline-passed")
        for attempt_id in waiting:
            if not self.has_slot():
                return
            async with self.lock(attempt_id):
                row = self.journal.attempt(attempt_id)
                if row is None or row.state != "waiting" or row.cancel_result is not None:
                    continue
                try:
                    refusal = await self.begin(row)
                except (Deferred, EdgeUnavailable) as error:
                    log.info("attempt %s: still waiting (%s)", attempt_id, type(error).__name__)
                    return
                except Exception as error:  # noqa: BLE001 - one Attempt must not stop the others
                    log.error(
                        "attempt %s: runtime-error while starting (%s)",
                        attempt_id,
                        type(error).__name__,
                    )
                    continue
                if refusal is not None:
                    code, message = refusal
                    log.info("attempt %s: not started after waiting: %s", attempt_id, message)
                    self.fail_before_stage_in(row, code)
                    continue
                row = self.journal.attempt(attempt_id)
                if row is not None and row.state not in TERMINAL:
                    await self.supervision.advance(row, raise_deferrals=False)

    def fail_before_stage_in(self, row: AttemptRow, code: str) -> None:
        """The Attempt fails before stage-in runs, with ``code`` in its failure record."""
        if self.journal.stage(row.attempt_id, "stage-in") is None:
            self.journal.launch_intent(row.attempt_id, "stage-in")
        self.supervision.fail_stage(row.attempt_id, "stage-in", code)
        self.set_state(row.attempt_id, "failed")

    async def begin(self, row: AttemptRow) -> tuple[str, str] | None:
        """Check the deadline, authorise again (with the stage-in grant when the edge
        combines them) and launch stage-in. Returns None once launched, else the
        (code, message) that stopped it; a refused stage-in grant fails the Attempt
        here and returns ``authorisation-refused``. Raises Deferred when the edge
        cannot answer now."""
        job = parse_job(row.material)
        if job.deadline_passed(datetime.now(UTC)):
            return (
                "attempt-deadline-passed",
                "the Attempt's deadline has passed; nothing was started",
            )
        issued: RepositoryGrant | None = None
        try:
            if self.supervision.needs_grant("stage-in", job) and self.authorisation.can_combine():
                # One round trip: the decision and the stage-in grant together.
                refused, issued = await self.authorisation.authorise_with_grant(
                    row.run_id, row.attempt_id, job
                )
            else:
                refused = await self.authorisation.authorise(row.run_id, row.attempt_id, job)
            if refused is not None:
                return "authorisation-refused", refused
            await self.supervision.launch(row, "stage-in", issued=issued)
        except EdgeRefused as error:
            self.fail_before_stage_in(row, "authorisation-refused")
            return "authorisation-refused", f"repository grant refused: {error.code}"
        return None
