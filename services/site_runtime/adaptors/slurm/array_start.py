"""The ``start-array`` command of the slurm executor (docs/site-commands.md; ADR 0032).

One command starts every prepared child of an array group as three held arrays:

1. the payload is checked (``invalid-request``), each child must be prepared here
   (``attempt-not-prepared``) and, for a new group, have no jobs or group of its own;
2. the children must be homogeneous (``array-not-homogeneous``, naming the field);
3. for a group not yet released: the accepted-work deadline, execution authority for
   every child, the member token (index 0's: one binding for the group) and whether
   the compute request can ever fit its partition;
4. each child's staging grants are issued and every task's material file written
   (``array_material.py``), then :class:`~.arrays.ArraySubmissions` submits the
   three arrays held and releases them (exact-identity recovery after a lost answer);
5. every child's own stage rows get its tasks (``JOBID_TASK``), so ``observe``,
   ``cancel`` and ``read-log`` of a child go through the single-chain paths.

Redelivery (the same command, or another with the same ``group_id``) answers the
same result and never submits again; a group whose submission was refused keeps
answering its refusal, and its children may then be started one by one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from metallo.identity.verify import MemberTokenRejected
from site_runtime.adaptors.slurm import views
from site_runtime.adaptors.slurm.array_journal import ArrayJournal
from site_runtime.adaptors.slurm.array_material import ArrayMaterial
from site_runtime.adaptors.slurm.arrays import ArrayDeadlinePassed, ArrayRefused, ArraySubmissions
from site_runtime.adaptors.slurm.grants import GrantRefused
from site_runtime.adaptors.slurm.journal import AttemptRow, SlurmJournal
from site_runtime.adaptors.slurm.rest import SlurmRefused
from site_runtime.adaptors.slurm.submission import ConsentRefused, StageSubmissions
from site_runtime.application.journaled import NOT_PREPARED
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand
from site_runtime.domain.consent import CONSENT_REFUSED, refusal_text
from site_runtime.domain.slurm_array_start import (
    INVALID,
    NOT_HOMOGENEOUS,
    UNSUPPORTED,
    ArrayStart,
    InvalidArrayRequest,
    array_tasks,
    parse_start_array,
    refused_name,
)
from site_runtime.domain.slurm_arrays import (
    ArrayMember,
    NotHomogeneous,
    TaskMapping,
    homogeneity_reason,
)
from site_runtime.domain.slurm_chain import deadline_refuses
from site_runtime.domain.slurm_refusals import DEADLINE_TEXT, stage_in_refusal_text
from site_runtime.domain.slurm_stages import STAGES

log = logging.getLogger("metallo.site_runtime.slurm")

#: Asks current authority for a child's new native effect: None, or why not.
Authorise = Callable[[str, str, dict[str, Any]], Awaitable[str | None]]
#: Why the compute request can never fit its partition (None: it can).
NeverFits = Callable[[AttemptRow, Any], Awaitable[str | None]]


class ArrayStartRefused(Exception):
    """A definite refusal of the whole ``start-array`` (nothing native exists)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ArrayStarts:
    """Handle ``start-array`` and a plain ``start`` of a child already in an array."""

    def __init__(
        self,
        *,
        journal: SlurmJournal,
        arrays: ArrayJournal,
        submissions: ArraySubmissions,
        stages: StageSubmissions,
        material: ArrayMaterial,
        authorise: Authorise,
        never_fits: NeverFits,
        clock: Callable[[], float],
    ) -> None:
        self.journal = journal
        self.arrays = arrays
        self.submissions = submissions
        self.stages = stages
        self.material = material
        self.authorise = authorise
        self.never_fits = never_fits
        self.clock = clock

    async def start_array(self, command: SiteCommand) -> CommandResult:
        """The command's exact result (the caller saves it); Deferred while it may pass."""
        try:
            request = parse_start_array(command.payload, command.attempt_id)
            job_ids = await self._start(request)
        except InvalidArrayRequest as invalid:
            return _refused(command, INVALID, str(invalid))
        except ArrayStartRefused as refused:
            return _refused(command, refused.code, str(refused))
        return self.result(command, request.attempt_ids, job_ids)

    async def _start(self, request: ArrayStart) -> dict[str, str]:
        group_id = request.group_id
        group = self.arrays.group(group_id)
        if group is not None and (
            group.mapping != TaskMapping(request.attempt_ids)
            or group.max_active != request.max_active
        ):
            raise ArrayStartRefused(
                "idempotency-conflict", "the array group was started with other tasks"
            )
        rows = self.arrays.stages(group_id) if group is not None else {}
        if rows and all(rows[s].state == "submitted" for s in STAGES):
            job_ids = {s: rows[s].job_id or "" for s in STAGES}
            self.arrays.assign_tasks(group_id, job_ids)
            return job_ids
        members = self._members(request, fresh=group is None)
        reason = self.submissions_reason(members)
        if reason is not None:
            raise ArrayStartRefused(*reason)
        first = self.journal.attempt(members[0].attempt_id)
        assert first is not None
        untouched = all(r.state in ("prepared", "submitting") for r in rows.values())
        if untouched:
            await self._authorise_all(members)
        try:
            credential = await self.stages.credential(first)
            if group is None and (why := await self.never_fits(first, credential)):
                raise ArrayStartRefused("slurm-request-never-fits", why)
            if not any(r.state == "submitted" for r in rows.values()):
                envs = self.submissions.environments(members, group_id)
                await self.material.write(members, group_id, envs)
            job_ids = await self.submissions.submit(
                group_id, request.attempt_ids, request.max_active, credential
            )
        except ConsentRefused as refused:
            await self.material.discard(members, group_id)
            raise ArrayStartRefused(CONSENT_REFUSED, refusal_text(refused.reason)) from None
        except MemberTokenRejected as rejected:
            raise ArrayStartRefused(
                "member-token-rejected", f"the member token was refused ({rejected.reason})"
            ) from None
        except ArrayDeadlinePassed:
            await self.material.discard(members, group_id)
            raise ArrayStartRefused("attempt-deadline-passed", DEADLINE_TEXT) from None
        except GrantRefused as refused:
            await self.material.discard(members, group_id)
            raise ArrayStartRefused(refused.code, str(refused)) from None
        except (SlurmRefused, ArrayRefused) as refused:
            await self.material.discard(members, group_id)
            raise ArrayStartRefused(refused.code, stage_in_refusal_text(refused.code)) from None
        except NotHomogeneous as different:
            raise ArrayStartRefused(NOT_HOMOGENEOUS, different.reason) from None
        self.arrays.assign_tasks(group_id, job_ids)
        log.info(
            "array group %s: %d tasks started as arrays %s", group_id, len(members), job_ids
        )
        return job_ids

    def submissions_reason(self, members: list[ArrayMember]) -> tuple[str, str] | None:
        """(code, message) when the children cannot share one array per stage."""
        reason = homogeneity_reason(members)
        if reason is not None:
            return NOT_HOMOGENEOUS, reason
        try:
            envs = self.submissions.environments(members, "g")
        except NotHomogeneous as different:
            return NOT_HOMOGENEOUS, different.reason
        name = refused_name([e for stage in envs.values() for e in stage.values()])
        if name is not None:
            return UNSUPPORTED, f"the variable {name} cannot be handed to an array task"
        return None

    def _members(self, request: ArrayStart, *, fresh: bool) -> list[ArrayMember]:
        members = []
        for task in request.tasks:
            att = self.journal.attempt(task.attempt_id)
            if att is None:
                raise ArrayStartRefused("attempt-not-prepared", f"task {task.index}: {NOT_PREPARED}")
            if (att.run_id, att.attempt_number) != (task.run_id, task.attempt_number):
                raise InvalidArrayRequest(f"task {task.index}'s Run or Attempt number differs")
            if fresh:
                if self.arrays.member(att.attempt_id) is not None:
                    raise InvalidArrayRequest(f"task {task.index} is in another array group")
                stages = self.journal.stages(att.attempt_id)
                if (
                    att.outcome is not None
                    or att.cancel_state is not None
                    or any(r.state != "prepared" for r in stages.values())
                ):
                    raise InvalidArrayRequest(
                        f"task {task.index}'s Attempt was started or ended on its own"
                    )
            members.append(ArrayMember(att.run_id, att.attempt_id, att.attempt_number, att.record))
        return members

    async def _authorise_all(self, members: list[ArrayMember]) -> None:
        record = members[0].record
        if deadline_refuses("stage-in", record.get("deadline_epoch"), self.clock()):
            raise ArrayStartRefused("attempt-deadline-passed", DEADLINE_TEXT)
        for index, m in enumerate(members):
            refused = await self.authorise(m.run_id, m.attempt_id, dict(m.record))
            if refused is not None:
                raise ArrayStartRefused("authorisation-refused", f"task {index}: {refused}")

    def child_start(self, command: SiteCommand, att: AttemptRow) -> CommandResult | None:
        """A plain ``start`` of a child of an array group: its task's jobs once the
        group's arrays are released (never a second submission); None when the child
        is in no group or its group was refused (it starts on its own then)."""
        member = self.arrays.member(att.attempt_id)
        if member is None:
            return None
        rows = self.arrays.stages(member[0])
        if any(r.state == "refused" for r in rows.values()):
            return None
        if not all(r.state == "submitted" for r in rows.values()):
            raise Deferred("slurm-observation-unavailable", "the child's array group is not started")
        self.arrays.assign_tasks(member[0], {s: rows[s].job_id or "" for s in STAGES})
        native = views.reported_state(self.journal, att.attempt_id)
        return CommandResult(
            command.command_id,
            "succeeded",
            native_jobs=views.native_jobs(self.journal, att.attempt_id),
            observation=views.current("queued", self.clock(), native),
        )

    def result(
        self, command: SiteCommand, attempt_ids: tuple[str, ...], job_ids: dict[str, str]
    ) -> CommandResult:
        """``succeeded``: index 0's jobs and observation, with every task's jobs."""
        first = attempt_ids[0]
        observation = views.current(
            "queued", self.clock(), views.reported_state(self.journal, first)
        )
        observation["array_tasks"] = array_tasks(attempt_ids, job_ids)
        return CommandResult(
            command.command_id,
            "succeeded",
            native_jobs=views.native_jobs(self.journal, first),
            observation=observation,
        )


def _refused(command: SiteCommand, code: str, message: str) -> CommandResult:
    return CommandResult(command.command_id, "refused", code, message[:500])
