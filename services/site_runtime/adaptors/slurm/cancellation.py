"""Whole-chain cancellation, newest job first (docs/site-runtime.md, Slurm executor).

An uncertain submission is settled first, so no job of the chain is missed; then
every submitted job is cancelled in the order and with the answer folding of
:mod:`site_runtime.domain.slurm_cancellation`. A job Slurm no longer knows is
reconciled with accounting (:mod:`site_runtime.domain.slurm_reconcile`): a 404
plus an empty accounting page is not proof of absence until the reconciliation
deadline passes, after which the stage is ``lost`` and counts as ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from site_runtime.adaptors.slurm.errors import deferring
from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal
from site_runtime.adaptors.slurm.rest import SlurmRest
from site_runtime.adaptors.slurm.sightings import in_accounting
from site_runtime.adaptors.slurm.submission import StageSubmissions, identity
from site_runtime.application.ports import Deferred
from site_runtime.domain.slurm_cancellation import (
    cancellation_order,
    fold_answers,
    settled_answer,
    task_cancelled,
)
from site_runtime.domain.slurm_reconcile import ABSENT, Deadlines, Sighting, reconcile


class ChainCancellation:
    """Cancel every job of the chain; ``fault`` is called at ``cancelled:<stage>``."""

    def __init__(
        self,
        *,
        journal: SlurmJournal,
        rest: SlurmRest,
        submissions: StageSubmissions,
        fault: Callable[[str], None] = lambda step: None,
        clock: Callable[[], float] = time.time,
        deadlines: Deadlines = Deadlines(),
    ) -> None:
        self.clock = clock
        self.deadlines = deadlines
        self.journal = journal
        self.rest = rest
        self.submissions = submissions
        self.fault = fault

    async def cancel_chain(self, att: AttemptRow) -> str:
        """Cancel the chain; ``accepted``, ``already-terminal`` or ``not-found``.

        Raises Deferred when Slurm or the member token cannot be used now.
        """
        user = att.record["binding"]["user"]
        with deferring(att.attempt_id):
            credential = await self.submissions.credential(att)
            for row in self.journal.stages(att.attempt_id).values():
                if row.state == "submitting":
                    await self.submissions.settle(att, row, credential)
            answers = []
            for step in cancellation_order(self.journal.stages(att.attempt_id)):
                if step.ended:
                    answers.append("already-terminal")
                    continue
                answer = await self.rest.cancel(step.job_id, credential=credential, user=user)
                self.fault(f"cancelled:{step.stage}")
                if answer == "accepted" and "_" in step.job_id:
                    # An array task cancelled while its array is pending leaves no
                    # record of its own anywhere: the accepted answer is the evidence.
                    self.journal.update_stage(
                        att.attempt_id, step.stage, native=task_cancelled()
                    )
                    answers.append(answer)
                    continue
                seen = None
                if answer == "already-terminal":
                    live = (await self.rest.list_jobs(credential=credential, user=user)).by_id
                    seen = live.get(step.job_id) or await self.rest.accounting_job(
                        step.job_id, credential=credential, user=user
                    )
                elif answer == "not-found":
                    # slurmctld's exact unknown-job answer: the queue is absent;
                    # accounting and the reconciliation deadline decide the rest.
                    found = reconcile(
                        self.journal.stages(att.attempt_id)[step.stage].native,
                        Sighting(ABSENT),
                        await in_accounting(
                            self.rest, step.job_id, credential=credential, user=user
                        ),
                        identity(att, step.stage),
                        self.clock(),
                        self.deadlines,
                    )
                    self.journal.update_stage(att.attempt_id, step.stage, native=found.facts)
                    if found.facts.get("terminal") or found.contradiction:
                        answers.append("already-terminal")
                        continue
                settled = settled_answer(answer, seen)
                if settled is None:
                    raise Deferred("slurm-observation-unavailable", "the job is not visible yet")
                answers.append(settled)
        return fold_answers(answers)
