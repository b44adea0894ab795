"""Submitting a group of prepared Attempts as three held Slurm arrays (ADR 0032).

For a group the Site Runtime saves the task index ↔ Attempt mapping, then for each
stage in order moves its array ``prepared`` → ``submitting`` (intent and exact
request saved before the POST) → ``held`` (array job id saved), each array after
the first depending ``aftercorr`` on the one before; only once all three are held
are they released (→ ``submitted``), stage-out first and stage-in last. A submission whose answer was lost is settled
by the array's exact identity (:func:`~site_runtime.domain.slurm_settling.settle_submission`:
a held array is never split into tasks, so it is one record), so a restart at any
point leaves exactly one array per stage.

Each array runs the loader script (``array_scripts.py``) that reads a task's own
material from ``METALLO_ARRAY_MATERIAL``; :meth:`ArraySubmissions.environments`
gives what each task's files hold (``array_material.py`` writes them before the
release). The ``start-array`` command around this is ``array_start.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm.array_journal import ArrayJournal, ArrayStageRow
from site_runtime.adaptors.slurm.array_scripts import array_scripts
from site_runtime.adaptors.slurm.errors import deferring
from site_runtime.adaptors.slurm.journal import SlurmJournal
from site_runtime.adaptors.slurm.rest import SlurmLimited, SlurmRefused, SlurmRest, SlurmUnreachable
from site_runtime.application.ports import Deferred
from site_runtime.domain.slurm_array_start import material_directory
from site_runtime.domain.slurm_arrays import (
    ArrayMember,
    ArrayStageRequest,
    NotHomogeneous,
    TaskMapping,
    array_identity,
    array_stage_request,
    homogeneity_reason,
)
from site_runtime.domain.slurm_chain import deadline_refuses
from site_runtime.domain.slurm_jobs import NativeIdentity, check_identifier
from site_runtime.domain.slurm_settling import settle_submission
from site_runtime.domain.slurm_stages import STAGES

log = logging.getLogger("metallo.site_runtime.slurm")


class ArrayDeadlinePassed(Exception):
    """The group's accepted-work deadline passed just before an array's POST."""


class ArrayRefused(Exception):
    """The group was refused earlier (an array's saved refusal ``code``)."""

    def __init__(self, code: str) -> None:
        super().__init__(f"the array group was refused ({code})")
        self.code = code


class ArraySubmissions:
    """Submit a group's three arrays held, save their ids, then release them.

    ``fault`` is called at ``intent:<stage>``, ``posted:<stage>``, ``held:<stage>``
    and ``released:<stage>``, the points a restart must recover from.
    """

    def __init__(
        self,
        *,
        journal: SlurmJournal,
        arrays: ArrayJournal,
        rest: SlurmRest,
        clock: Callable[[], float] = time.time,
        fault: Callable[[str], None] = lambda step: None,
    ) -> None:
        self.journal = journal
        self.arrays = arrays
        self.rest = rest
        self.clock = clock
        self.fault = fault

    def members(self, attempt_ids: Sequence[str]) -> list[ArrayMember]:
        """The prepared Attempts in group order; ValueError for one not prepared here."""
        members = []
        for attempt_id in attempt_ids:
            att = self.journal.attempt(attempt_id)
            if att is None or att.outcome is not None:
                raise ValueError(f"Attempt {attempt_id} is not prepared here")
            stages = self.journal.stages(attempt_id)
            if any(row.state != "prepared" for row in stages.values()):
                raise ValueError(f"Attempt {attempt_id} already has jobs of its own")
            members.append(ArrayMember(att.run_id, att.attempt_id, att.attempt_number, att.record))
        return members

    def identity(self, members: Sequence[ArrayMember], group_id: str, stage: str) -> NativeIdentity:
        """The exact identity of the group's ``stage`` array."""
        first = members[0].record
        b = first["binding"]
        return array_identity(first["prefix"], group_id, stage, b["account"], b["user"])

    def request(
        self,
        members: Sequence[ArrayMember],
        group_id: str,
        stage: str,
        after: str | None,
        max_active: int | None,
    ) -> ArrayStageRequest:
        """The exact held array request of ``stage`` (NotHomogeneous raised)."""
        record = members[0].record
        return array_stage_request(
            members,
            group_id=group_id,
            stage=stage,
            after=after,
            max_active=max_active,
            script=array_scripts(record.get("script_version", 1))[stage],
            material_directory=material_directory(
                record["workspace_root"], record["prefix"], group_id
            ),
        )

    def environments(
        self, members: Sequence[ArrayMember], group_id: str
    ) -> dict[str, dict[int, dict[str, str]]]:
        """stage → task index → the variables of that task's material file."""
        return {
            stage: self.request(members, group_id, stage, None, None).task_environment
            for stage in STAGES
        }

    async def submit(
        self,
        group_id: str,
        attempt_ids: Sequence[str],
        max_active: int | None,
        credential: MemberCredential,
    ) -> dict[str, str]:
        """Bring the group's three arrays to ``submitted``; ``{stage: array job id}``.

        Idempotent: a group already (partly) submitted resumes where it stopped.
        Raises NotHomogeneous (nothing submitted), ValueError for Attempts not
        prepared here, SlurmRefused (saved as the array's refusal; arrays already
        held are cancelled) and ArrayRefused when it was refused before, ArrayDeadlinePassed, MemberTokenRejected, and Deferred
        for everything that may pass.
        """
        check_identifier(group_id, "array group id")
        mapping = TaskMapping(tuple(attempt_ids))
        # A new group takes only Attempts without jobs of their own; a saved one resumes.
        if self.arrays.group(group_id) is None:
            members = self.members(mapping.attempts)
        else:
            members = self._saved(mapping)
        reason = homogeneity_reason(members)
        if reason is not None:
            raise NotHomogeneous(reason)
        self.arrays.create_group(group_id, mapping, max_active)
        user = members[0].record["binding"]["user"]
        with deferring(group_id, token_rejection=False):
            after: str | None = None
            for stage in STAGES:
                row = self.arrays.stages(group_id)[stage]
                if row.state == "submitting":
                    row = await self.settle(members, group_id, row, credential)
                if row.state == "prepared":
                    row = await self.post(members, group_id, stage, after, max_active, credential)
                if row.state == "refused":
                    raise ArrayRefused((row.refusal or {}).get("code") or "array-group-refused")
                if row.job_id is None:
                    raise Deferred("slurm-observation-unavailable", "the array is not held yet")
                after = row.job_id
            # Released last stage first: until stage-in is released no task runs, so no
            # dependency can fail before the array waiting on it was released (slurmctld
            # refuses to release a task whose dependency can never be satisfied).
            for stage in reversed(STAGES):
                row = self.arrays.stages(group_id)[stage]
                if row.state == "held":
                    assert row.job_id is not None
                    await self.rest.release(row.job_id, credential=credential, user=user)
                    self.arrays.update_stage(group_id, stage, state="submitted")
                    self.fault(f"released:{stage}")
        rows = self.arrays.stages(group_id)
        return {stage: rows[stage].job_id or "" for stage in STAGES}

    def _saved(self, mapping: TaskMapping) -> list[ArrayMember]:
        members = []
        for attempt_id in mapping.attempts:
            att = self.journal.attempt(attempt_id)
            if att is None:
                raise ValueError(f"Attempt {attempt_id} is not prepared here")
            members.append(ArrayMember(att.run_id, att.attempt_id, att.attempt_number, att.record))
        return members

    async def post(
        self,
        members: Sequence[ArrayMember],
        group_id: str,
        stage: str,
        after: str | None,
        max_active: int | None,
        credential: MemberCredential,
    ) -> ArrayStageRow:
        """Save the intent and exact request, POST the array held, save its job id."""
        record = members[0].record
        request = self.request(members, group_id, stage, after, max_active)
        saved = {
            "script_version": request.script_version,
            "script": request.script,
            "job": request.job,
        }
        self.arrays.update_stage(group_id, stage, state="submitting", request=saved)
        self.fault(f"intent:{stage}")

        def deadline_check() -> None:
            if deadline_refuses(stage, record.get("deadline_epoch"), self.clock()):
                raise ArrayDeadlinePassed()

        try:
            submitted = await self.rest.submit(
                script=request.script,
                job=request.job,
                secret_environment={},
                credential=credential,
                user=record["binding"]["user"],
                before_post=deadline_check,
            )
        except ArrayDeadlinePassed:
            self.arrays.update_stage(group_id, stage, state="prepared")
            raise
        except SlurmRefused as refused:
            self.arrays.update_stage(
                group_id,
                stage,
                state="refused",
                refusal={"code": refused.code, "error_number": refused.error_number},
            )
            await self._cancel_held(group_id, record["binding"]["user"], credential)
            raise
        except (SlurmLimited, SlurmUnreachable) as error:
            # Nothing was created: the array goes back to prepared and is sent again.
            self.arrays.update_stage(group_id, stage, state="prepared")
            raise Deferred(error.code, "the array will be submitted again") from None
        self.fault(f"posted:{stage}")
        self.arrays.update_stage(group_id, stage, state="held", job_id=submitted.job_id)
        self.fault(f"held:{stage}")
        return self.arrays.stages(group_id)[stage]

    async def _cancel_held(self, group_id: str, user: str, credential: MemberCredential) -> None:
        """A refused array ends the group: the arrays already held never run."""
        for row in self.arrays.stages(group_id).values():
            if row.state == "held" and row.job_id:
                await self.rest.cancel(row.job_id, credential=credential, user=user)
                self.arrays.update_stage(
                    group_id, row.stage, state="refused", refusal={"code": "array-group-refused"}
                )

    async def settle(
        self,
        members: Sequence[ArrayMember],
        group_id: str,
        row: ArrayStageRow,
        credential: MemberCredential,
    ) -> ArrayStageRow:
        """Adopt the array with the stage's exact identity, or prove the POST made none."""
        user = members[0].record["binding"]["user"]
        group = self.arrays.group(group_id)
        created = group.created_at if group else self.clock()
        since = datetime.fromtimestamp(created - 86400, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        matches = await self.rest.find(
            self.identity(members, group_id, row.stage),
            since_iso=since,
            credential=credential,
            user=user,
        )
        settlement = settle_submission(matches)
        if settlement.verdict == "ambiguous":
            log.error(
                "array group %s %s: %d jobs carry its identity; progress stops",
                group_id,
                row.stage,
                len(matches),
            )
            raise Deferred(
                "slurm-observation-unavailable", "several jobs carry the array's identity"
            )
        for extra in settlement.cancel:
            await self.rest.cancel(extra, credential=credential, user=user)
        if settlement.verdict == "adopt" and settlement.job is not None:
            state = "held" if settlement.held else "submitted"
            self.arrays.update_stage(group_id, row.stage, state=state, job_id=settlement.job.job_id)
            log.info(
                "array group %s %s: adopted array %s by exact identity",
                group_id,
                row.stage,
                settlement.job.job_id,
            )
        else:
            self.arrays.update_stage(group_id, row.stage, state="prepared")
        return self.arrays.stages(group_id)[row.stage]
