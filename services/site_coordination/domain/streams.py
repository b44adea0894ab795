"""Ordered command streams (seed 004 §4A; docs/site-commands.md).

A stream is one (Site, environment) pair; Kubernetes and Slurm Sites have
separate streams. Commands are numbered 1, 2, 3… without gaps. The Runtime is
handed the command after the last one with a recorded result, the same one
again until its result is recorded. Acknowledgement advances exactly when that
next command's result is recorded, in the same transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from site_coordination.domain.errors import Conflict, Invalid

ENVIRONMENTS = frozenset({"slurm", "k8s"})
START_ARRAY = "start-array"
KINDS = frozenset(
    {"prepare", "start", START_ARRAY, "observe", "cancel", "apply", "terminate", "read-log"}
)
MAX_ARRAY_TASKS = 1000
MATERIAL_KINDS = frozenset({"prepare", "apply"})
TERMINAL_PHASES = frozenset({"succeeded", "failed", "cancelled"})
OUTCOMES = frozenset({"succeeded", "refused"})

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_PAYLOAD_BYTES = 256 * 1024


def check_identifier(name: str, value: str) -> str:
    """Return ``value`` when it is a safe identifier (1–128 of ``[A-Za-z0-9._:-]``).

    Raises :class:`Invalid` (``invalid-argument``) otherwise.
    """
    if not isinstance(value, str) or not _ID.match(value):
        raise Invalid("invalid-argument", f"{name} must be 1-128 characters of [A-Za-z0-9._:-]")
    return value


@dataclass(frozen=True)
class StreamKey:
    """One ordered stream: a Site and one of its environments (``slurm`` | ``k8s``)."""

    site_id: str
    environment: str

    def __str__(self) -> str:
        return f"{self.site_id}/{self.environment}"


@dataclass(frozen=True)
class NewCommand:
    """A command to append (from ``AppendSiteCommand``), validated."""

    command_id: str
    stream: StreamKey
    kind: str
    run_id: str
    attempt_id: str
    attempt_number: int
    payload_json: str  # canonical JSON object text


@dataclass(frozen=True)
class StoredCommand:
    """A numbered command as stored, with its delivery and result state."""

    command_id: str
    stream: StreamKey
    sequence: int
    kind: str
    run_id: str
    attempt_id: str
    attempt_number: int
    payload: dict[str, Any]
    request_hash: str
    delivered: bool
    result_json: str | None

    def to_wire(self) -> dict[str, Any]:
        """The command as the Runtime sees it (docs/site-commands.md)."""
        return {
            "sequence": self.sequence,
            "command_id": self.command_id,
            "kind": self.kind,
            "site_id": self.stream.site_id,
            "environment": self.stream.environment,
            "run_id": self.run_id,
            "attempt_id": self.attempt_id,
            "attempt_number": self.attempt_number,
            "payload": self.payload,
        }


def validate_new_command(command_id: str, site_id: str, environment: str, kind: str,
                         run_id: str, attempt_id: str, attempt_number: int,
                         payload: Any) -> None:
    """Check an append request's values; raise :class:`Invalid` naming the first bad one.

    ``payload`` is the decoded ``payload_json`` and must be a JSON object.
    """
    check_identifier("command_id", command_id)
    check_identifier("site_id", site_id)
    if environment not in ENVIRONMENTS:
        raise Invalid("invalid-argument", "environment must be slurm or k8s")
    if kind not in KINDS:
        raise Invalid("invalid-argument", f"kind must be one of {sorted(KINDS)}")
    check_identifier("run_id", run_id)
    check_identifier("attempt_id", attempt_id)
    if not 1 <= attempt_number <= 1_000_000:
        raise Invalid("invalid-argument", "attempt_number must be 1..1000000")
    if not isinstance(payload, dict):
        raise Invalid("invalid-argument", "payload_json must be a JSON object")
    if kind == START_ARRAY:
        array_task_attempts(payload, run_id, attempt_id)


def array_task_attempts(payload: dict[str, Any], run_id: str, attempt_id: str) -> list[str]:
    """The Attempt ids of a ``start-array`` payload's tasks in index order
    (docs/site-commands.md): indices exactly 0..N-1 with N from 1 to 1,000, distinct
    Attempts, task 0 the envelope's own Run and Attempt. Raises :class:`Invalid`
    naming the first thing wrong."""
    array = payload.get("array")
    tasks = array.get("tasks") if isinstance(array, dict) else None
    if not isinstance(tasks, list) or not 1 <= len(tasks) <= MAX_ARRAY_TASKS:
        raise Invalid("invalid-argument", f"a start-array payload names 1..{MAX_ARRAY_TASKS} tasks")
    attempts: list[str] = []
    for position, task in enumerate(tasks):
        if not isinstance(task, dict) or task.get("index") != position:
            raise Invalid("invalid-argument", f"start-array task {position} is not index {position}")
        check_identifier(f"task {position} run_id", task.get("run_id"))
        attempts.append(check_identifier(f"task {position} attempt_id", task.get("attempt_id")))
    if len(set(attempts)) != len(attempts):
        raise Invalid("invalid-argument", "a start-array payload names an Attempt twice")
    if (tasks[0]["run_id"], tasks[0]["attempt_id"]) != (run_id, attempt_id):
        raise Invalid("invalid-argument", "start-array task 0 must be the command's own Attempt")
    return attempts


def decide_result(command: StoredCommand, acknowledged: int, result_json: str) -> bool:
    """Decide a result report for ``command`` (seed 004 §4A).

    Returns True when the result must be recorded now (and the acknowledgement
    advanced to ``command.sequence``), False when the identical result is already
    recorded. Raises :class:`Conflict` ``result-conflict`` when a different result
    is recorded, ``command-not-delivered`` when the command is not the delivered
    next one of its stream.
    """
    if command.result_json is not None:
        if command.result_json == result_json:
            return False
        raise Conflict("result-conflict",
                       f"command {command.command_id} already has a different recorded result")
    if command.sequence != acknowledged + 1 or not command.delivered:
        raise Conflict("command-not-delivered",
                       f"command {command.sequence} has not been delivered to the Runtime yet")
    return True


def result_ends_attempt(kind: str, result: dict[str, Any]) -> bool:
    """True when a recorded result ends its Attempt (terminal phase, or a refused
    ``prepare``/``start``/``apply``) so it cannot renew grants or tokens (seed 001).
    """
    if result.get("outcome") == "refused" and kind in {"prepare", "start", "apply"}:
        return True
    observation = result.get("observation") or {}
    return isinstance(observation, dict) and observation.get("phase") in TERMINAL_PHASES
