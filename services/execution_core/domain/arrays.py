"""Array groups: a collection's children started as one Slurm ``start-array`` (ADR 0032).

Each child is still a Run of its own, admitted, planned and prepared alone. Its
group forms while the children are prepared; the group then settles exactly once:

- ``dispatched``: every child has a succeeded ``prepare`` on the group's one Site —
  ONE ``start-array`` command (its id derived from the group id) replaces N starts;
- ``individual`` (``prefer``) or ``failed`` (``require``): the group cannot be one
  array — a child refused or ended before it, a Site that is not Slurm, or the
  group's one shared deadline passed first — and the reason is kept;
- after ``dispatched`` the Site's answer makes it ``started`` (each child takes its
  own task's native jobs) or, for a refusal, ``individual`` / ``failed`` again.

A child of a ``failed`` group ends ``array-unavailable`` with the reason; a child
of an ``individual`` group sends its own ``start`` once it holds one of the group's
``max_active`` slots (the array's ``%maxActive`` no longer throttles it), and gives
the slot back when its Attempt ends. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from execution_core.domain.lifecycle_facts import CommandFact

FORMING = "forming"
DISPATCHED = "dispatched"
STARTED = "started"
INDIVIDUAL = "individual"
FAILED = "failed"
SETTLED = frozenset({DISPATCHED, STARTED, INDIVIDUAL, FAILED})

PREFER, REQUIRE = "prefer", "require"
MODES = frozenset({PREFER, REQUIRE})
MAX_SIZE = 1000
START_ARRAY = "start-array"
MAX_REASON = 500

_GROUP_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_COMMAND_NAMESPACE = uuid.UUID("0b7e3c55-8f0e-4c3a-a3f4-6a2d1e9c7b21")


@dataclass(frozen=True)
class GroupRequest:
    """A LaunchRun's ``array_group`` as given."""

    group_id: str
    size: int
    index: int
    max_active: int
    mode: str


def check_request(g: GroupRequest) -> str:
    """The first thing wrong with ``g`` ("" when it is acceptable)."""
    if not _GROUP_ID.match(g.group_id):
        return "array_group.group_id must be a lowercase UUID"
    if not 1 <= g.size <= MAX_SIZE:
        return f"array_group.size must be 1..{MAX_SIZE}"
    if not 0 <= g.index < g.size:
        return f"array_group.index must be 0..{g.size - 1}"
    if not 1 <= g.max_active <= g.size:
        return f"array_group.max_active must be 1..{g.size}"
    if g.mode not in MODES:
        return "array_group.mode must be prefer or require"
    return ""


def same_group(saved: dict[str, Any], g: GroupRequest) -> bool:
    """Whether a saved group row has the size, max_active and mode ``g`` names."""
    return (saved["size"], saved["max_active"], saved["mode"]) == (g.size, g.max_active, g.mode)


def start_array_command_id(group_id: str) -> str:
    """The one ``start-array`` command id of a group (uuid5: a replay names the same)."""
    return str(uuid.uuid5(_COMMAND_NAMESPACE, f"{group_id}:{START_ARRAY}"))


@dataclass(frozen=True)
class GroupFacts:
    """A group's row as the settle rule needs it."""

    state: str
    mode: str
    size: int
    prepared: int  # children with a succeeded prepare
    dropped: int  # children that ended (or were refused) before the group settled
    deadline: datetime


@dataclass(frozen=True)
class Settle:
    """What to do with a forming group now: ``dispatch``, ``individual``, ``failed`` or
    ``wait`` (until ``wake_at``); ``reason`` says why it is not one array."""

    action: str
    reason: str = ""
    wake_at: datetime | None = None


def settle(g: GroupFacts, now: datetime) -> Settle:
    """Decide a forming group (module doc); a settled group is left as it is."""
    if g.state != FORMING:
        return Settle("none")
    fallback = INDIVIDUAL if g.mode == PREFER else FAILED
    if g.dropped:
        return Settle(fallback, f"{g.dropped} of {g.size} children ended before the array could start")
    if g.prepared >= g.size:
        return Settle("dispatch")
    if now >= g.deadline:
        return Settle(fallback, f"only {g.prepared} of {g.size} children were prepared "
                                "before the array group's deadline")
    return Settle("wait", wake_at=g.deadline)


def not_an_array(mode: str, why: str) -> tuple[str, str]:
    """(state, reason) of a group that cannot be an array at all (e.g. not a Slurm Site)."""
    return (INDIVIDUAL if mode == PREFER else FAILED), why[:MAX_REASON]


def held_at_limit(mode: str, size: int, limit: int | None) -> tuple[str, str] | None:
    """(state, reason) of a forming group one of whose children planning holds at a
    concurrent-Run limit of ``limit`` Runs (None: not known), or None to keep waiting.

    Every child of a group holds a slot from its admission until the array starts, so
    a group larger than the limit can never form: both modes settle at once. Under a
    limit that would admit the whole group, ``prefer`` still falls back at once (its
    admitted children would hold their slots waiting for the rest) and ``require``
    waits, bounded by the group's deadline.
    """
    if limit is not None and limit < size:
        why = f"the concurrent-Run limit of {limit} admits fewer than its {size} children at once"
        return (INDIVIDUAL if mode == PREFER else FAILED), why[:MAX_REASON]
    if mode == PREFER:
        held = f"of {limit} " if limit is not None else ""
        return INDIVIDUAL, f"the concurrent-Run limit {held}was reached while its {size} children formed"
    return None


def after_refusal(mode: str, code: str, message: str) -> tuple[str, str]:
    """(state, reason) after the Site refused the ``start-array`` command."""
    why = f"start-array refused: {code or 'refused'}" + (f": {message}" if message else "")
    return (INDIVIDUAL if mode == PREFER else FAILED), why[:MAX_REASON]


def start_array_payload(group_id: str, max_active: int,
                        tasks: list[tuple[int, str, str, int]]) -> dict[str, Any]:
    """The ``start-array`` payload (docs/site-commands.md) from (index, run_id, attempt_id,
    attempt_number) in index order."""
    return {"array": {
        "group_id": group_id,
        "max_active": max_active,
        "tasks": [{"index": i, "run_id": r, "attempt_id": a, "attempt_number": n}
                  for i, r, a, n in tasks],
    }}


def task_results(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each task's start result, by attempt id, from a succeeded ``start-array`` result:
    its own ``JOBID_TASK`` native jobs and a ``queued`` observation. Tasks without an
    attempt id or jobs are left out (their child then stays uncertain and is observed)."""
    observation = result.get("observation") or {}
    out: dict[str, dict[str, Any]] = {}
    for task in observation.get("array_tasks") or ():
        if not isinstance(task, dict) or not isinstance(task.get("attempt_id"), str):
            continue
        jobs = [{"stage": str(j.get("stage", ""))[:64], "job_id": str(j.get("job_id", ""))[:128]}
                for j in task.get("native_jobs") or () if isinstance(j, dict)][:16]
        if not jobs:
            continue
        out[task["attempt_id"]] = {
            "outcome": "succeeded", "code": None, "message": None, "native_jobs": jobs,
            "observation": {"phase": "queued", "native_state": observation.get("native_state") or "",
                            "observed_at": observation.get("observed_at")},
        }
    return out


@dataclass(frozen=True)
class ArrayFacts:
    """The current Attempt's array group, as the lifecycle needs it (None: no group)."""

    group_id: str
    index: int
    state: str
    mode: str
    deadline: datetime
    reason: str = ""
    command_id: str = ""  # the start-array command, once dispatched
    command_seq: int = 0
    command_at: datetime | None = None
    slot: str = ""  # its maxActive slot as an individual start: "" | held | done
    slot_free: bool = False  # an individual group has a slot free for it now


def pending_start(a: ArrayFacts | None) -> CommandFact | None:
    """The start-array command as the child's in-flight ``start`` while the group is
    dispatched (the Site's answer not applied yet): an uncertain native start, never
    repeated, stopped under the same Attempt identity if needed."""
    if a is None or a.state != DISPATCHED or not a.command_id or a.command_at is None:
        return None
    return CommandFact(command_id=a.command_id, kind="start", ordinal=1, seq=a.command_seq,
                       created_at=a.command_at)


def holds_start(a: ArrayFacts | None) -> bool:
    """Whether the child's own ``start`` is held: its group still forms, or it fell back
    to individual starts and every ``max_active`` slot is taken."""
    if a is None:
        return False
    return a.state == FORMING or (a.state == INDIVIDUAL and not a.slot and not a.slot_free)


def slot_change(a: ArrayFacts | None, sends_start: bool, ended: bool) -> str:
    """``take`` when a child of an individual group sends its start, ``free`` when one
    holding a slot ends, "" otherwise."""
    if a is None or a.state != INDIVIDUAL:
        return ""
    if not a.slot and sends_start:
        return "take"
    if a.slot == "held" and ended:
        return "free"
    return ""


def start_note(a: ArrayFacts | None) -> str:
    """``Run.array_start``: how the child was (or will not be) started."""
    if a is None:
        return ""
    if a.state == STARTED:
        return f"array {a.group_id} task {a.index}"
    if a.state == INDIVIDUAL:
        return f"individual: {a.reason}"[:MAX_REASON]
    if a.state == FAILED:
        return f"refused: {a.reason}"[:MAX_REASON]
    return ""


def predecessor(commands: list[dict[str, Any]]) -> str:
    """The ``after_command_id`` of an Attempt's next command: its newest command sent to
    the Site, log reads and rows relayed from a group's start-array apart. So a child
    other than index 0 names its own prepare after start-array, index 0 (whose Attempt
    carries the start-array command) names start-array; "" for an Attempt's first."""
    ordered = [c for c in commands if c["kind"] != "read-log" and not c.get("relayed_by")]
    return max(ordered, key=lambda c: c["seq"])["command_id"] if ordered else ""
