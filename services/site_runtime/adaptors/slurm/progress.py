"""Observing a staged Attempt and moving it on (docs/site-runtime.md, Slurm executor).

Each observation (unless cancellation was requested) first finishes any
uncertain or held submission; it then reads every stage's job from one native
list (slurmctld) and, for a job that is not in it, from slurmdbd — each asked on
its own — and reconciles both with the saved facts
(:mod:`site_runtime.domain.slurm_reconcile`: reconciliation deadlines, terminal
evidence immutable, a contradiction stops the Attempt with an explicit outcome
instead of deferring); it cancels held duplicates, renews the grants of an array
child's tasks that have not started yet (:mod:`~.array_grant_renewal`), releases the
grants of an ended staging job, and asks the domain
(:mod:`site_runtime.domain.slurm_chain`) whether the chain ended and which stage is
submitted next. The first ``running`` observation is
saved before it is returned; a chain never goes back to ``queued``.

Once the chain has ended its terminal observation is saved (immutable evidence:
later observations replay it), then the Attempt's grants are released and its
workspace removed; cleanup is durable and retried until it is done.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm import sightings, views
from site_runtime.adaptors.slurm.array_grant_renewal import ArrayGrantRenewal
from site_runtime.adaptors.slurm.array_material import ArrayMaterial
from site_runtime.adaptors.slurm.errors import deferring
from site_runtime.adaptors.slurm.grants import StageGrants
from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal, StageRow
from site_runtime.adaptors.slurm.material import COMMIT
from site_runtime.adaptors.slurm.rest import SlurmRefused, SlurmRest
from site_runtime.adaptors.slurm.scripts import OUTPUT_COMMIT_MARK
from site_runtime.adaptors.slurm.submission import (
    ConsentRefused,
    DeadlinePassed,
    StageSubmissions,
    identity,
    log_path,
)
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand
from site_runtime.domain import slurm_requests
from site_runtime.domain.consent import consent_verdict
from site_runtime.domain.outcomes import now_iso
from site_runtime.domain.slurm_chain import (
    Verdict,
    contradiction_verdict,
    deadline_failure,
    decide_outcome,
    next_submission,
    observed_phase,
    terminal_observation,
)
from site_runtime.domain.slurm_jobs import JobList
from site_runtime.domain.slurm_reconcile import Deadlines, requeue_bound, worst
from site_runtime.domain.slurm_settling import held_duplicates
from site_runtime.domain.slurm_stages import STAGES, STAGING_STAGES

log = logging.getLogger("metallo.site_runtime.slurm")


class ChainProgress:
    """Observe every stage's job, advance the chain, decide and clean up."""

    def __init__(
        self,
        *,
        journal: SlurmJournal,
        rest: SlurmRest,
        submissions: StageSubmissions,
        grants: StageGrants,
        clock: Callable[[], float],
        deadlines: Deadlines = Deadlines(),
        array_material: ArrayMaterial | None = None,
        renewal: ArrayGrantRenewal | None = None,
    ) -> None:
        self.array_material = array_material
        self.renewal = renewal
        self.deadlines = deadlines
        self.journal = journal
        self.rest = rest
        self.submissions = submissions
        self.grants = grants
        self.clock = clock

    async def observe(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        """The Attempt's observation now (its saved outcome once decided).

        Raises Deferred when Slurm, the member token or cleanup cannot progress now; a
        member token refused for good ends the Attempt (``member-consent-refused``).
        """
        if att.outcome is not None:
            if att.cleanup_state != "done":
                await self.cleanup(att)
            return self._result(command, att.attempt_id, att.outcome)
        try:
            with deferring(att.attempt_id):
                credential = await self.submissions.credential(att)
                return await self._advance(command, att, credential)
        except SlurmRefused:
            return await self.finish(command, views.attempt(self.journal, att.attempt_id))
        except ConsentRefused:
            self.consent_refused(att)
            return await self.finish(command, views.attempt(self.journal, att.attempt_id))

    def consent_refused(self, att: AttemptRow) -> None:
        """Save the Attempt's end after the member-token owner refused it for good
        (:func:`~site_runtime.domain.consent.consent_verdict`), before any cleanup, so
        neither a restart nor a later command submits another stage."""
        if att.outcome is None:
            self._save_outcome(
                att,
                self.journal.stages(att.attempt_id),
                consent_verdict(self.journal.stages(att.attempt_id)),
            )

    async def _advance(
        self, command: SiteCommand, att: AttemptRow, credential: MemberCredential
    ) -> CommandResult:
        stages = self.journal.stages(att.attempt_id)
        if stages["stage-in"].state in ("prepared", "refused"):
            if att.cancel_state is not None or stages["stage-in"].state == "refused":
                return await self.finish(command, att)
            # Not started yet (or its start was deferred): nothing native exists.
            return CommandResult(
                command.command_id, "succeeded", observation=views.current("prepared", self.clock())
            )
        if att.cancel_state is None:
            for stage in STAGES:
                if stages[stage].state in ("submitting", "held"):
                    after = _predecessor_id(stages, stage)
                    await self.submissions.ensure_submitted(att, stage, after, credential)
        confidence, stopped = await self._read_jobs(att, credential)
        att = views.attempt(self.journal, att.attempt_id)
        stages = self.journal.stages(att.attempt_id)
        if stopped is not None:
            self._save_outcome(att, stages, stopped)
            return await self.finish(command, views.attempt(self.journal, att.attempt_id))
        if self.renewal is not None and att.record.get("array"):
            refused = await self.renewal.renew(att, stages, credential)
            if refused is not None:
                self._save_outcome(att, self.journal.stages(att.attempt_id), refused)
                return await self.finish(command, views.attempt(self.journal, att.attempt_id))
            stages = self.journal.stages(att.attempt_id)
        for stage in STAGING_STAGES:
            # A staging job's grants are revoked once the job has ended.
            if (stages[stage].native or {}).get("terminal"):
                if stages[stage].grant_state == "issued":
                    await self.grants.release(att.attempt_id, stage)
                if self.renewal is not None:
                    await self.renewal.release_superseded(att.attempt_id, stage)
        if self.decide(att, stages) is not None:
            return await self.finish(command, att)
        for _ in STAGES:
            step = next_submission(
                stages, att.cancel_state is not None, att.record.get("deadline_epoch"), self.clock()
            )
            if step is None:
                break
            if step.action == "submit":
                try:
                    await self.submissions.ensure_submitted(att, step.stage, step.after, credential)
                except DeadlinePassed:
                    step = None
                except SlurmRefused:
                    return await self.finish(command, views.attempt(self.journal, att.attempt_id))
            if step is None or step.action == "deadline-passed":
                self._save_outcome(att, stages, Verdict("failed", failure=deadline_failure()))
                return await self.finish(command, views.attempt(self.journal, att.attempt_id))
            stages = self.journal.stages(att.attempt_id)
        att = views.attempt(self.journal, att.attempt_id)
        stages = self.journal.stages(att.attempt_id)
        phase = observed_phase(bool(att.reported_running), stages)
        if phase == "running" and not att.reported_running:
            # The first running observation is saved before it is returned: a
            # restarted Runtime never reports the Attempt queued again.
            self.journal.update_attempt(att.attempt_id, reported_running=1)
        return self._result(
            command,
            att.attempt_id,
            views.reported(self.journal, att.attempt_id, phase, self.clock(), confidence),
        )

    def known(self, command: SiteCommand, att: AttemptRow, confidence: str) -> CommandResult:
        """The Attempt's observation from its saved facts alone, with ``confidence``
        (``stale`` / ``uncertain``): the answer of an observe a condition of this
        Attempt kept pending past its bound."""
        if att.outcome is not None:
            return self._result(command, att.attempt_id, att.outcome)
        stages = self.journal.stages(att.attempt_id)
        if stages["stage-in"].job_id is None:
            phase = "prepared"
        else:
            phase = observed_phase(bool(att.reported_running), stages)
        observation = views.reported(self.journal, att.attempt_id, phase, self.clock(), confidence)
        return self._result(command, att.attempt_id, observation)

    async def _read_jobs(
        self, att: AttemptRow, credential: MemberCredential
    ) -> tuple[str | None, Verdict | None]:
        """Reconcile and save each live stage's facts (module doc); the Attempt's
        confidence now and the verdict of a contradiction that stops it, if any."""
        user = att.record["binding"]["user"]
        stages = self.journal.stages(att.attempt_id)
        jobs = await sightings.queue_jobs(self.rest, credential=credential, user=user)
        if jobs is not None:
            await self._sweep_duplicates(att, stages, jobs, credential)
        confidences: list[str | None] = []
        for row in (stages[s] for s in STAGES):
            if row.job_id is None or (row.native or {}).get("terminal"):
                continue
            found = await sightings.reconcile_job(
                self.rest,
                job_id=row.job_id,
                saved=row.native,
                jobs=jobs,
                identity=identity(att, row.stage),
                credential=credential,
                user=user,
                now=self.clock(),
                deadlines=self.deadlines,
                requeues=requeue_bound(row.stage, self.deadlines),
            )
            if found.cancel:
                await self._cancel_requeued(att, row, found.facts, credential)
            self.journal.update_stage(att.attempt_id, row.stage, native=found.facts)
            confidences.append(found.confidence)
            if found.contradiction is not None:
                log.error(
                    "attempt %s %s: job %s contradicts the saved record (%s)",
                    att.attempt_id,
                    row.stage,
                    row.job_id,
                    found.contradiction,
                )
                row = self.journal.stages(att.attempt_id)[row.stage]
                return None, contradiction_verdict(row.stage, row, found.contradiction)
        return worst(confidences), None

    async def _cancel_requeued(
        self, att: AttemptRow, row: StageRow, facts: dict[str, Any], credential: MemberCredential
    ) -> None:
        """Cancel a job Slurm requeued past its stage's bound, and every later stage's
        job (they wait on it), before its end is saved: Slurm does not re-run
        Metallo's work; a new Attempt is Execution Core's to start."""
        user = att.record["binding"]["user"]
        log.warning(
            "attempt %s %s: job %s was requeued by Slurm (restarts %s); cancelling it",
            att.attempt_id,
            row.stage,
            row.job_id,
            facts.get("restarts"),
        )
        stages = self.journal.stages(att.attempt_id)
        for stage in STAGES[STAGES.index(row.stage) :]:
            later = stages[stage]
            if later.job_id and not (later.native or {}).get("terminal"):
                await self.rest.cancel(later.job_id, credential=credential, user=user)

    async def _sweep_duplicates(
        self,
        att: AttemptRow,
        stages: dict[str, StageRow],
        jobs: JobList,
        credential: MemberCredential,
    ) -> None:
        """Cancel held jobs that carry a stage's identity but are not its saved job."""
        user = att.record["binding"]["user"]
        for row in stages.values():
            # An array task's duplicates are settled per group, at its submission.
            if row.state not in ("held", "submitted") or "_" in (row.job_id or ""):
                continue
            wanted = identity(att, row.stage)
            named = jobs.by_name.get(wanted.name, [])
            for job_id in held_duplicates(wanted, named, row.job_id):
                log.warning(
                    "attempt %s %s: cancelling held duplicate job %s",
                    att.attempt_id,
                    row.stage,
                    job_id,
                )
                await self.rest.cancel(job_id, credential=credential, user=user)

    def decide(self, att: AttemptRow, stages: dict[str, StageRow]) -> dict[str, Any] | None:
        """Save and return the terminal observation once the chain has ended, else None."""
        if att.outcome is not None:
            return att.outcome
        verdict = decide_outcome(stages, att.cancel_state is not None)
        if verdict is None:
            return None
        return self._save_outcome(att, stages, verdict)

    def _save_outcome(
        self, att: AttemptRow, stages: dict[str, StageRow], verdict: Verdict
    ) -> dict[str, Any]:
        commit = self._output_commit(att) if verdict.phase == "succeeded" else None
        outcome = terminal_observation(verdict, stages, now_iso(self.clock()), commit)
        self.journal.update_attempt(att.attempt_id, outcome=outcome, cleanup_state="pending")
        return outcome

    async def finish(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        """The terminal result: decided (Deferred while the chain goes on), cleaned up."""
        outcome = self.decide(att, self.journal.stages(att.attempt_id))
        att = views.attempt(self.journal, att.attempt_id)
        if outcome is None:
            raise Deferred("slurm-observation-unavailable", "the chain has not ended yet")
        await self.cleanup(att)
        return self._result(command, att.attempt_id, outcome)

    async def cleanup(self, att: AttemptRow) -> None:
        """Release grants and remove the workspace; durable and retried until done."""
        for stage in STAGING_STAGES:
            await self.grants.release(att.attempt_id, stage)
        pending = [
            s for s in self.journal.stages(att.attempt_id).values() if s.grant_state == "issued"
        ]
        superseded_left = self.renewal is not None and not (
            await self.renewal.release_superseded(att.attempt_id)
        )
        ws = Path(slurm_requests.workspace(att.record, att.attempt_id))
        try:
            info = os.lstat(ws)
        except FileNotFoundError:
            info = None
        except OSError:
            raise Deferred("workspace-unavailable", "the workspace cannot be inspected") from None
        if info is not None:
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                raise Deferred("workspace-unavailable", "the workspace is not a directory")
            try:
                shutil.rmtree(ws)
            except OSError:
                raise Deferred(
                    "workspace-unavailable", "the workspace cannot be removed now"
                ) from None
        array = att.record.get("array")
        if array and self.array_material is not None:
            # The files of a task that never read them (it was cancelled, or never ran).
            folder = self.array_material.directory(att.record, array["group_id"])
            self.array_material.remove_task(folder, array["index"])
        if pending or superseded_left:
            raise Deferred("repository-unavailable", "a repository grant is not released yet")
        self.journal.update_attempt(att.attempt_id, cleanup_state="done")

    def _output_commit(self, att: AttemptRow) -> str | None:
        """The commit stage-out pushed, from the last 64 KiB of its log (None: nothing)."""
        try:
            with open(log_path(att, "stage-out"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 65536))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        found = None
        for line in text.splitlines():
            if line.startswith(OUTPUT_COMMIT_MARK):
                value = line[len(OUTPUT_COMMIT_MARK) :].strip()
                if COMMIT.match(value):
                    found = value
        return found

    def _result(
        self, command: SiteCommand, attempt_id: str, observation: dict[str, Any]
    ) -> CommandResult:
        return CommandResult(
            command.command_id,
            "succeeded",
            native_jobs=views.native_jobs(self.journal, attempt_id),
            observation=observation,
        )


def _predecessor_id(stages: dict[str, StageRow], stage: str) -> str | None:
    index = STAGES.index(stage)
    return stages[STAGES[index - 1]].job_id if index > 0 else None
