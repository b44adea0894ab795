"""The ``start-array`` Site command's rules (docs/site-commands.md, ``start-array``;
ADR 0032): its payload, each task's material file and the result's ``array_tasks``.

A ``start-array`` names every child of an array group with its task index; the
envelope is the index-0 child's. Each task's own values (the variables that differ
task to task: its Run, Attempt, workspace, commit, commands, ``METALLO_PARAM_*``
values and, for staging, its repository grant) reach it through a per-index
material file the Runtime writes and the task's loader reads by
``$SLURM_ARRAY_TASK_ID`` — never through a command line or shell source.

Pure functions over plain values; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from site_runtime.domain.slurm_arrays import MAX_ARRAY_TASKS
from site_runtime.domain.slurm_jobs import check_identifier
from site_runtime.domain.slurm_stages import STAGES

INVALID = "invalid-request"
NOT_HOMOGENEOUS = "array-not-homogeneous"
UNSUPPORTED = "array-unsupported"

#: Names a task's material may set (shell identifiers) ...
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: ... except those bash reads at start-up or that change how the loader itself parses.
LOADER_REFUSED_NAMES = frozenset(
    {"IFS", "SHELLOPTS", "BASHOPTS", "BASH_ENV", "ENV", "PS4", "BASH_XTRACEFD", "POSIXLY_CORRECT"}
)
#: A material file is small: a task's commands are bounded by prepare (1 MiB).
MAX_MATERIAL_BYTES = 2 * 1024 * 1024


class InvalidArrayRequest(ValueError):
    """A ``start-array`` payload that is not the contract's shape (``invalid-request``)."""

    code = INVALID


@dataclass(frozen=True)
class ArrayTask:
    """One child of the group: its task index and ids."""

    index: int
    run_id: str
    attempt_id: str
    attempt_number: int


@dataclass(frozen=True)
class ArrayStart:
    """A checked ``start-array`` payload: tasks in index order, ``max_active`` 1..N."""

    group_id: str
    max_active: int
    tasks: tuple[ArrayTask, ...]

    @property
    def attempt_ids(self) -> tuple[str, ...]:
        """The Attempts in index order (index ``i`` is ``attempt_ids[i]``)."""
        return tuple(t.attempt_id for t in self.tasks)


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArrayRequest(f"{what} must be an integer from {low} to {high}")
    return value


def _ident(value: Any, what: str) -> str:
    try:
        return check_identifier(value, what)
    except ValueError:
        raise InvalidArrayRequest(f"{what} is not a usable identifier") from None


def parse_start_array(payload: Mapping[str, Any], envelope_attempt_id: str) -> ArrayStart:
    """The checked payload ``{"array": {group_id, max_active, tasks}}``.

    Indices must be exactly 0..N-1 (N from 1 to :data:`MAX_ARRAY_TASKS`), every
    Attempt distinct, ``max_active`` absent/0 (→ N) or 1..N, and the envelope's
    Attempt the index-0 child. Raises :class:`InvalidArrayRequest` naming the first
    thing wrong (at most one task is quoted, by index).
    """
    array = payload.get("array") if isinstance(payload, Mapping) else None
    if not isinstance(array, Mapping):
        raise InvalidArrayRequest("the payload has no array object")
    group_id = _ident(array.get("group_id"), "array.group_id")
    raw = array.get("tasks")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_ARRAY_TASKS:
        raise InvalidArrayRequest(f"array.tasks must list 1 to {MAX_ARRAY_TASKS} tasks")
    tasks: dict[int, ArrayTask] = {}
    seen: set[str] = set()
    for position, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise InvalidArrayRequest(f"array.tasks[{position}] is not an object")
        index = _int(item.get("index"), f"array.tasks[{position}].index", 0, len(raw) - 1)
        if index in tasks:
            raise InvalidArrayRequest(f"task index {index} is named twice")
        attempt_id = _ident(item.get("attempt_id"), f"task {index}'s attempt_id")
        if attempt_id in seen:
            raise InvalidArrayRequest(f"task {index}'s Attempt is named twice")
        seen.add(attempt_id)
        tasks[index] = ArrayTask(
            index=index,
            run_id=_ident(item.get("run_id"), f"task {index}'s run_id"),
            attempt_id=attempt_id,
            attempt_number=_int(
                item.get("attempt_number"), f"task {index}'s attempt_number", 1, 10**6
            ),
        )
    ordered = tuple(tasks[i] for i in range(len(raw)))
    if ordered[0].attempt_id != envelope_attempt_id:
        raise InvalidArrayRequest("the command's Attempt is not the task at index 0")
    max_active = array.get("max_active")
    if max_active in (None, 0):
        max_active = len(ordered)
    max_active = _int(max_active, "array.max_active", 1, len(ordered))
    return ArrayStart(group_id=group_id, max_active=max_active, tasks=ordered)


def refused_name(environments: Sequence[Mapping[str, str]]) -> str | None:
    """The first variable of the tasks' own environments that a material file cannot
    hand over (not a shell name, or one of :data:`LOADER_REFUSED_NAMES`); None when
    all can."""
    for env in environments:
        for name in env:
            if not _NAME.match(name) or name in LOADER_REFUSED_NAMES:
                return name
    return None


def material_bytes(environment: Mapping[str, str]) -> bytes:
    """One task's material file: ``NAME=value`` entries, each ended by a NUL byte
    (values may hold newlines; none holds NUL), in name order. The loader exports
    each entry as one word, so nothing in a value is ever parsed by the shell.
    ValueError for a name :func:`refused_name` refuses, a NUL in a value, or a file
    above :data:`MAX_MATERIAL_BYTES`."""
    if refused_name([environment]) is not None:
        raise ValueError("a variable name cannot be handed to an array task")
    out = bytearray()
    for name in sorted(environment):
        value = environment[name]
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError("a variable's value cannot be handed to an array task")
        out += f"{name}={value}".encode() + b"\x00"
    if len(out) > MAX_MATERIAL_BYTES:
        raise ValueError("an array task's material is too large")
    return bytes(out)


def material_file(stage: str, index: int) -> str:
    """The file name of task ``index``'s material for ``stage`` in the group's
    material directory (``<stage>.<index>``, what the loader opens)."""
    if stage not in STAGES or not 0 <= index < MAX_ARRAY_TASKS:
        raise ValueError("no such array task")
    return f"{stage}.{index}"


def material_directory(workspace_root: str, prefix: str, group_id: str) -> str:
    """The group's material directory beside its logs:
    ``<workspace root>/<prefix>-<group>.material``."""
    check_identifier(group_id, "array group id")
    return f"{workspace_root}/{prefix}-{group_id}.material"


def task_log_path(workspace_root: str, prefix: str, group_id: str, stage: str, index: int) -> str:
    """Task ``index``'s log of ``stage`` (the array's ``%a`` pattern, filled in)."""
    return f"{workspace_root}/{prefix}-{group_id}.{stage}.{index}.log"


def array_tasks(
    attempt_ids: Sequence[str], array_job_ids: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The result's ``observation.array_tasks``: per index, its Attempt and the
    ``{stage, job_id}`` of its task in each stage's array (``JOBID_TASK``)."""
    return [
        {
            "index": index,
            "attempt_id": attempt_id,
            "native_jobs": [
                {"stage": stage, "job_id": f"{array_job_ids[stage]}_{index}"} for stage in STAGES
            ],
        }
        for index, attempt_id in enumerate(attempt_ids)
    ]
