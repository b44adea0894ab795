"""The rules of a collection submitted as Slurm arrays (ADR 0032; docs/site-runtime.md).

N prepared Attempts of one array group become three native array jobs, one per
stage (``stage-in`` → ``compute`` → ``stage-out``), each ``--array=0-(N-1)%maxActive``,
submitted held with the identity ``<prefix>-<group><suffix>`` /
``<prefix>:<group>:<stage>`` and joined task to task with ``aftercorr``. Task ``i``
is the Attempt at index ``i`` of the group's :class:`TaskMapping`; array task order
is never taken as execution order.

Only what is the same for every task may sit in the array's one request: the
Attempts must be *homogeneous* (:func:`homogeneity_reason`). What differs per task
(its Run, Attempt, commands, values, commits) is each task's own material
(:attr:`ArrayStageRequest.task_environment`), keyed by index.

Pure functions over saved Attempt records; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from site_runtime.domain import slurm_requests
from site_runtime.domain.slurm_jobs import NativeIdentity, check_identifier
from site_runtime.domain.slurm_stages import NAME_SUFFIX, STAGES

#: The most tasks one array group may have (a collection's bound, seed 002 §15).
MAX_ARRAY_TASKS = 1000

#: Record fields every Attempt of a group must share: each is part of the array's one
#: request (resources, partition, identity, script) or of its one deadline check.
HOMOGENEOUS_FIELDS: tuple[tuple[str, ...], ...] = (
    ("compute",),
    ("staging",),
    ("prefix",),
    ("workspace_root",),
    ("binding", "user"),
    ("binding", "account"),
    ("script_version",),
    ("repository", "url"),
    ("repository_ca",),
    ("deadline_epoch",),
)

#: Fields of a rendered stage request that may differ task to task; every other field
#: of the job must be the same for the array to carry it.
PER_TASK_JOB_FIELDS = frozenset(
    {"name", "comment", "standard_output", "standard_error", "environment", "dependency", "hold"}
)

_TASK_JOB_ID = re.compile(r"^([0-9]{1,18})_([0-9]{1,9})$")


class NotHomogeneous(ValueError):
    """The Attempts cannot share one array; ``reason`` says which field differs."""

    code = "array-not-homogeneous"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ArrayMember:
    """One prepared Attempt of a group: its saved record and its ids."""

    run_id: str
    attempt_id: str
    attempt_number: int
    record: Mapping[str, Any]


def _field(record: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def homogeneity_reason(members: Sequence[ArrayMember]) -> str | None:
    """None when ``members`` can share one array per stage, else why not.

    The reason names the first field of :data:`HOMOGENEOUS_FIELDS` that differs and
    the first Attempt (in the given order) whose value differs from the first
    Attempt's, e.g. ``compute.partition differs: a-2 has 'gpu', a-1 has 'batch'``.
    A group must have 1 to :data:`MAX_ARRAY_TASKS` distinct Attempts.
    """
    if not members:
        return "an array needs at least one Attempt"
    if len(members) > MAX_ARRAY_TASKS:
        return f"{len(members)} Attempts exceed the array bound of {MAX_ARRAY_TASKS}"
    seen: set[str] = set()
    for m in members:
        if m.attempt_id in seen:
            return f"Attempt {m.attempt_id} is named twice"
        seen.add(m.attempt_id)
    first = members[0]
    for path in HOMOGENEOUS_FIELDS:
        expected = _field(first.record, path)
        for other in members[1:]:
            value = _field(other.record, path)
            if value != expected:
                if isinstance(expected, Mapping) and isinstance(value, Mapping):
                    keys = sorted(set(expected) | set(value), key=str)
                    key = next(k for k in keys if expected.get(k) != value.get(k))
                    name = ".".join((*path, str(key)))
                    expected, value = expected.get(key), value.get(key)
                else:
                    name = ".".join(path)
                return (
                    f"{name} differs: {other.attempt_id} has {value!r}, "
                    f"{first.attempt_id} has {expected!r}"
                )
    return None


@dataclass(frozen=True)
class TaskMapping:
    """Array task index ↔ Attempt id of one group: index ``i`` is ``attempts[i]``.

    Indices are 0..N-1 with no gap; an Attempt has exactly one index. Saved before
    the arrays are submitted; the order is the group's, never execution order.
    """

    attempts: tuple[str, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.attempts) <= MAX_ARRAY_TASKS:
            raise ValueError(f"an array group has 1 to {MAX_ARRAY_TASKS} Attempts")
        if len(set(self.attempts)) != len(self.attempts):
            raise ValueError("an Attempt appears twice in the array group")
        for attempt_id in self.attempts:
            check_identifier(attempt_id, "attempt id")

    @classmethod
    def from_indices(cls, indices: Mapping[str, int]) -> TaskMapping:
        """The mapping from saved ``{attempt id: task index}``; ValueError unless the
        indices are exactly 0..N-1, each once."""
        by_index = sorted(indices.items(), key=lambda item: item[1])
        if [i for _, i in by_index] != list(range(len(by_index))):
            raise ValueError("task indices must be 0..N-1, each once")
        return cls(tuple(a for a, _ in by_index))

    def __len__(self) -> int:
        return len(self.attempts)

    def index_of(self, attempt_id: str) -> int:
        """The task index of ``attempt_id``; KeyError when it is not in the group."""
        try:
            return self.attempts.index(attempt_id)
        except ValueError:
            raise KeyError(attempt_id) from None

    def attempt_at(self, index: int) -> str:
        """The Attempt of task ``index``; KeyError outside 0..N-1."""
        if not 0 <= index < len(self.attempts):
            raise KeyError(index)
        return self.attempts[index]

    def indices(self) -> dict[str, int]:
        """``{attempt id: task index}`` (the form saved and sent in ``start-array``)."""
        return {a: i for i, a in enumerate(self.attempts)}


def array_spec(tasks: int, max_active: int | None) -> str:
    """The ``--array`` value for ``tasks`` tasks: ``0-(tasks-1)%max_active``, without
    ``%`` when ``max_active`` is None. ValueError outside 1..MAX_ARRAY_TASKS tasks or
    for a ``max_active`` below 1."""
    if not isinstance(tasks, int) or not 1 <= tasks <= MAX_ARRAY_TASKS:
        raise ValueError(f"an array has 1 to {MAX_ARRAY_TASKS} tasks")
    spec = f"0-{tasks - 1}"
    if max_active is None:
        return spec
    if not isinstance(max_active, int) or max_active < 1:
        raise ValueError("maxActive must be at least 1")
    return f"{spec}%{max_active}"


def array_identity(
    prefix: str, group_id: str, stage: str, account: str, user: str
) -> NativeIdentity:
    """The exact identity of the group's ``stage`` array: name
    ``<prefix>-<group><suffix>``, comment ``<prefix>:<group>:<stage>``."""
    if stage not in STAGES:
        raise ValueError("unknown stage")
    check_identifier(group_id, "array group id")
    return NativeIdentity(
        name=f"{prefix}-{group_id}{NAME_SUFFIX[stage]}",
        comment=f"{prefix}:{group_id}:{stage}",
        account=account,
        user=user,
    )


def aftercorr(array_job_id: str | None) -> str | None:
    """The dependency of a stage's array on the previous stage's array: task ``i``
    starts once task ``i`` of ``array_job_id`` completed (``aftercorr:<id>``); None
    for stage-in."""
    if array_job_id is None:
        return None
    if not array_job_id.isdigit():
        raise ValueError("an array's job id is its number")
    return f"aftercorr:{array_job_id}"


@dataclass(frozen=True)
class ArrayTaskId:
    """One array task as Slurm names it: ``<array job id>_<task index>``."""

    array_job_id: str
    task: int

    def __str__(self) -> str:
        return f"{self.array_job_id}_{self.task}"


def task_job_id(array_job_id: str, task: int) -> str:
    """``JOBID_TASK``, the name ``scancel`` and ``sacct -j`` take for one task."""
    if not array_job_id.isdigit() or not 0 <= task < MAX_ARRAY_TASKS:
        raise ValueError("not an array task")
    return str(ArrayTaskId(array_job_id, task))


def parse_task_job_id(value: str) -> ArrayTaskId:
    """``"123_4"`` → ``ArrayTaskId("123", 4)``. ValueError for a plain job id, a
    pending range (``123_[0-9%3]``) or anything else."""
    match = _TASK_JOB_ID.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError("not an array task id (JOBID_TASK)")
    task = int(match.group(2))
    if task >= MAX_ARRAY_TASKS:
        raise ValueError("array task index out of bounds")
    return ArrayTaskId(str(int(match.group(1))), task)


def child_tasks(
    array_job_ids: Mapping[str, str | None], mapping: TaskMapping, attempt_id: str
) -> dict[str, str]:
    """``{stage: JOBID_TASK}`` of ``attempt_id``'s task in each array submitted so far
    (``array_job_ids`` is stage → array job id, None before submission): cancelling a
    child cancels its task in every stage, so no later task of it waits for ever on
    ``aftercorr``. KeyError when the Attempt is not in the group."""
    index = mapping.index_of(attempt_id)
    return {
        stage: task_job_id(job_id, index)
        for stage in STAGES
        if (job_id := array_job_ids.get(stage)) is not None
    }


def log_path(workspace_root: str, prefix: str, group_id: str, stage: str) -> str:
    """The per-task log pattern of the group's ``stage`` array: Slurm replaces ``%a``
    with the task index, so task ``i``'s log is its Attempt's (by the mapping)."""
    return f"{workspace_root}/{prefix}-{group_id}.{stage}.%a.log"


@dataclass(frozen=True)
class ArrayStageRequest:
    """One stage's array request: ``job`` (v0.0.38 shape, held, no credentials),
    ``script`` text and ``task_environment`` — index → the variables that differ per
    task, which the task reads from its own material, not from the job."""

    stage: str
    script_version: int
    script: str
    job: dict[str, Any]
    task_environment: dict[int, dict[str, str]]


def array_stage_request(
    members: Sequence[ArrayMember],
    *,
    group_id: str,
    stage: str,
    after: str | None,
    max_active: int | None,
    script: str,
    material_directory: str | None = None,
) -> ArrayStageRequest:
    """The held array request of ``stage`` for ``members`` (index = position).

    Each member's single-chain request is rendered
    (:func:`~.slurm_requests.stage_request`); their jobs must agree on every field
    outside :data:`PER_TASK_JOB_FIELDS` (else :class:`NotHomogeneous`). The array
    keeps the environment every task shares; the rest is per task, read by each task
    from its file in ``material_directory`` (``METALLO_ARRAY_MATERIAL``). ``after`` is
    the previous stage's array job id; a task whose ``aftercorr`` predecessor failed
    can never start, so slurmctld ends it (``kill_on_invalid_dependency``).
    """
    reason = homogeneity_reason(members)
    if reason is not None:
        raise NotHomogeneous(reason)
    rendered = [
        slurm_requests.stage_request(
            dict(m.record),
            run_id=m.run_id,
            attempt_id=m.attempt_id,
            attempt_number=m.attempt_number,
            stage=stage,
            after=None,
            script=script,
        )
        for m in members
    ]
    jobs = [r["job"] for r in rendered]
    shared = {k: v for k, v in jobs[0].items() if k not in PER_TASK_JOB_FIELDS}
    for m, job in zip(members, jobs, strict=True):
        mine = {k: v for k, v in job.items() if k not in PER_TASK_JOB_FIELDS}
        if mine != shared:
            field = next(k for k in sorted(set(mine) | set(shared)) if mine.get(k) != shared.get(k))
            raise NotHomogeneous(f"job field {field} differs: {m.attempt_id}")
    environments = [job["environment"] for job in jobs]
    common = {
        k: v for k, v in environments[0].items() if all(e.get(k) == v for e in environments[1:])
    }
    first = members[0].record
    binding = first["binding"]
    ident = array_identity(first["prefix"], group_id, stage, binding["account"], binding["user"])
    logs = log_path(first["workspace_root"], first["prefix"], group_id, stage)
    job = {
        **shared,
        "name": ident.name,
        "comment": ident.comment,
        "array": array_spec(len(members), max_active),
        "standard_output": logs,
        "standard_error": logs,
        "environment": {**dict(sorted(common.items())), "METALLO_ARRAY_TASKS": str(len(members))},
        "hold": True,
    }
    if material_directory is not None:
        job["environment"]["METALLO_ARRAY_MATERIAL"] = material_directory
    dependency = aftercorr(after)
    if dependency:
        job["dependency"] = dependency
        job["kill_on_invalid_dependency"] = True
    per_task = {
        i: {k: v for k, v in env.items() if k not in common} for i, env in enumerate(environments)
    }
    return ArrayStageRequest(
        stage=stage,
        script_version=rendered[0]["script_version"],
        script=script,
        job=job,
        task_environment=per_task,
    )
