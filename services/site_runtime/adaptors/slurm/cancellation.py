"""Whole-chain cancellation, newest job first (docs/site-runtime.md, Slurm executor).

An uncertain submission is settled first, so no job of the chain is missed; then
every submitted job is cancelled in the order and with the answer folding of
:mod:`site_runtime.domain.slurm_cancellation`. A job Slurm no longer knows is
looked up in accounting, since a 404 plus an empty accounting page is not proof
of absence.
"""

from __future__ import annotations

from collections.abc import Callable

from site_runtime.adaptors.slurm import views
from site_runtime.adaptors.slurm.errors import deferring
from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal
from site_runtime.adaptors.slurm.rest import SlurmRest
from site_runtime.adaptors.slurm.submission import StageSubmissions
from site_runtime.application.ports import Deferred
from site_runtime.domain.slurm_cancellation import (
    cancellation_order,
    fold_answers,
    settled_answer,
)


class ChainCancellation:
    """Cancel every job of the chain; ``fault`` is called at ``cancelled:<stage>``."""

    def __init__(
        self,
        *,
        journal: SlurmJournal,
        rest: SlurmRest,
        submissions: StageSubmissions,
        fault: Callable[[str], None] = lambda step: None,
    ) -> None:
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
                seen = None
                if answer == "already-terminal":
                    live = {
                        j.job_id: j
                        for j in await self.rest.list_jobs(credential=credential, user=user)
                    }
                    seen = live.get(step.job_id) or await self.rest.accounting_job(
                        step.job_id, credential=credential, user=user
                    )
                elif answer == "not-found":
                    seen = await self.rest.accounting_job(
                        step.job_id, credential=credential, user=user
                    )
                    if seen is not None:
                        facts = views.native_facts(seen)
                        self.journal.update_stage(att.attempt_id, step.stage, native=facts)
                settled = settled_answer(answer, seen)
                if settled is None:
                    raise Deferred("slurm-observation-unavailable", "the job is not visible yet")
                answers.append(settled)
        return fold_answers(answers)
