"""Slurm native job model: identities, job requests, and tolerant response parsing.

Seed 000 (Native job identity; Staging settings; Site GPU classes) and issue 6:
three jobs per Attempt, ``<prefix>-<attempt>-in``, ``<prefix>-<attempt>`` and
``<prefix>-<attempt>-out``, each with the comment ``<prefix>:<run>:<attempt>:<stage>``,
the binding's account and user, ``requeue: false`` and ``afterok`` on the stage
before.  Responses are parsed for slurmrestd v0.0.38 and later shapes:
``job_state`` as a string or a list of flags, numbers as plain values or
``{set, infinite, number}`` objects, ``errors``/``warnings`` absent, and exit
codes as raw wait statuses (v0.0.38 slurmctld) or ``{status, return_code, signal}``
objects (slurmdbd and later versions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

STAGES = ("stage-in", "compute", "stage-out")
NAME_SUFFIX = {"stage-in": "-in", "compute": "", "stage-out": "-out"}

# Job states that end a job (seed 003: terminal evidence is immutable once reviewed).
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
STARTED_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED"})

_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


class ResponseShapeError(ValueError):
    """A slurmrestd answer has a shape this parser does not know (never quotes the body)."""


def check_identifier(value: str, what: str) -> str:
    """``value`` when it is a safe identifier (letters, digits, ``._-``, ≤ 128); ValueError."""
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise ValueError(f"{what} is not a usable identifier")
    return value


def check_prefix(prefix: str) -> str:
    """The native-name prefix (default ``metallo``): lower-case, ≤ 32 characters."""
    if not _PREFIX.match(prefix):
        raise ValueError("the native-name prefix must be lower-case letters, digits or '-'")
    return prefix


@dataclass(frozen=True)
class NativeIdentity:
    """The exact identity of one stage's job (name, comment, account, user)."""

    name: str
    comment: str
    account: str
    user: str

    def matches(self, job: NativeJob) -> bool:
        """True when ``job`` carries exactly this identity."""
        return (job.name, job.comment, job.account, job.user) == (
            self.name,
            self.comment,
            self.account,
            self.user,
        )


def stage_identity(
    prefix: str, run_id: str, attempt_id: str, stage: str, account: str, user: str
) -> NativeIdentity:
    """The native identity of ``stage`` of an Attempt (seed 000, Native job identity)."""
    if stage not in STAGES:
        raise ValueError("unknown stage")
    return NativeIdentity(
        name=f"{prefix}-{attempt_id}{NAME_SUFFIX[stage]}",
        comment=f"{prefix}:{run_id}:{attempt_id}:{stage}",
        account=account,
        user=user,
    )


@dataclass(frozen=True)
class NativeJob:
    """One job as slurmctld or slurmdbd reports it (normalised).

    ``state`` is the base state (``PENDING``, ``COMPLETED``...); ``flags`` the
    rest of a list-shaped ``job_state``; ``exit_code``/``signal`` are None when
    unknown; ``source`` is ``slurmctld`` or ``slurmdbd``.
    """

    job_id: str
    name: str
    comment: str
    account: str
    user: str
    state: str
    reason: str | None
    exit_code: int | None
    signal: int | None
    partition: str | None
    dependency: str | None
    source: str

    @property
    def terminal(self) -> bool:
        """True when the job has ended."""
        return self.state in TERMINAL_STATES

    @property
    def started(self) -> bool:
        """True when the job runs or ran (used for the first ``running`` observation)."""
        return self.state in STARTED_STATES or self.terminal


def number(value: Any) -> int | None:
    """A Slurm number: plain int, or ``{set, infinite, number}`` (None when unset/infinite)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        if value.get("infinite") is True or value.get("set") is False:
            return None
        return number(value.get("number"))
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        # slurmdbd's comment object: {"job": ..., "administrator": ..., "system": ...}
        return _text(value.get("job"))
    return str(value)


def job_state(value: Any) -> tuple[str, tuple[str, ...]]:
    """``(base state, other flags)`` from a string, a list of flags, or ``{current: ...}``."""
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, str):
        flags = [value]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        flags = list(value)
    else:
        raise ResponseShapeError("job state has an unknown shape")
    flags = [f.strip().upper() for f in flags if f and f.strip()]
    if not flags:
        raise ResponseShapeError("job state is empty")
    base = next((f for f in flags if f in TERMINAL_STATES or f in ACTIVE_STATES), flags[0])
    return base, tuple(f for f in flags if f != base)


def exit_status(value: Any) -> tuple[int | None, int | None]:
    """``(exit code, signal)`` from a raw wait status or an exit-code object."""
    if isinstance(value, dict):
        signal_obj = value.get("signal")
        signal = None
        if isinstance(signal_obj, dict):
            signal = number(signal_obj.get("signal_id", signal_obj.get("id")))
        status = value.get("status")
        statuses = status if isinstance(status, list) else [status]
        code = number(value.get("return_code"))
        if "SIGNALED" in statuses and signal is not None:
            return code, signal
        return code, signal if signal else None
    raw = number(value)
    if raw is None:
        return None, None
    if raw & 0x7F:
        return None, raw & 0x7F
    return (raw >> 8) & 0xFF, None


def _reason(job: dict[str, Any]) -> str | None:
    reason = job.get("state_reason")
    if reason is None and isinstance(job.get("state"), dict):
        reason = job["state"].get("reason")
    return reason if isinstance(reason, str) else None


def parse_job(job: Any, source: str) -> NativeJob:
    """One job object of ``/slurm/*/jobs`` or ``/slurmdb/*/jobs`` as :class:`NativeJob`."""
    if not isinstance(job, dict):
        raise ResponseShapeError("a job entry is not an object")
    job_id = number(job.get("job_id"))
    if job_id is None:
        raise ResponseShapeError("a job entry has no job id")
    state_field = job.get("job_state", job.get("state"))
    state, _flags = job_state(state_field)
    code, signal = exit_status(job.get("exit_code"))
    user = job.get("user_name", job.get("user"))
    association = job.get("association")
    account = job.get("account")
    if not account and isinstance(association, dict):
        account = association.get("account")
    dependency = job.get("dependency")
    return NativeJob(
        job_id=str(job_id),
        name=_text(job.get("name")),
        comment=_text(job.get("comment")),
        account=_text(account),
        user=_text(user),
        state=state,
        reason=_reason(job),
        exit_code=code,
        signal=signal,
        partition=_text(job.get("partition")) or None,
        dependency=_text(dependency) or None,
        source=source,
    )


def parse_jobs(body: Any, source: str) -> list[NativeJob]:
    """All jobs of a jobs response (``jobs`` may be absent when empty)."""
    if not isinstance(body, dict):
        raise ResponseShapeError("the answer is not a JSON object")
    jobs = body.get("jobs", [])
    if not isinstance(jobs, list):
        raise ResponseShapeError("jobs is not a list")
    return [parse_job(j, source) for j in jobs]


def error_numbers(body: Any) -> list[int]:
    """The ``error_number``/``error_code`` values of an answer's ``errors`` (may be absent)."""
    if not isinstance(body, dict):
        return []
    errors = body.get("errors") or []
    if not isinstance(errors, list):
        return []
    found = []
    for e in errors:
        if isinstance(e, dict):
            n = number(e.get("error_number", e.get("error_code")))
            if n is not None and n != 0:
                found.append(n)
    return found


def submitted_job_id(body: Any) -> str | None:
    """The job id of a submit answer (``job_id`` or ``result.job_id``), None when absent."""
    if not isinstance(body, dict):
        return None
    value = body.get("job_id")
    if value is None and isinstance(body.get("result"), dict):
        value = body["result"].get("job_id")
    n = number(value)
    return str(n) if n is not None and n > 0 else None


@dataclass(frozen=True)
class StagingSettings:
    """Resources of both Git/LFS staging jobs, saved at preparation (seed 000)."""

    cpus: int = 1
    memory_mib: int = 512
    time_minutes: int = 10
    partition: str = "staging"

    def to_json(self) -> dict[str, Any]:
        """JSON form saved in the Attempt record."""
        return {
            "cpus": self.cpus,
            "memory_mib": self.memory_mib,
            "time_minutes": self.time_minutes,
            "partition": self.partition,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StagingSettings:
        """Read the saved form back."""
        return cls(
            cpus=int(data["cpus"]),
            memory_mib=int(data["memory_mib"]),
            time_minutes=int(data["time_minutes"]),
            partition=str(data["partition"]),
        )


def job_request(
    *,
    identity: NativeIdentity,
    partition: str,
    cpus: int,
    memory_mib: int,
    time_minutes: int,
    nodes: int,
    dependency: str | None,
    working_directory: str,
    standard_output: str,
    environment: dict[str, str],
    tres_per_node: str | None = None,
    hold: bool = False,
) -> dict[str, Any]:
    """The ``job`` object of a v0.0.38 submission (credentials are added only at POST time)."""
    job: dict[str, Any] = {
        "name": identity.name,
        "comment": identity.comment,
        "account": identity.account,
        "partition": partition,
        "requeue": False,
        "nodes": nodes,
        "tasks": 1,
        "cpus_per_task": cpus,
        "memory_per_node": memory_mib,
        "time_limit": time_minutes,
        "current_working_directory": working_directory,
        "standard_output": standard_output,
        "standard_error": standard_output,
        "environment": dict(sorted(environment.items())),
    }
    if dependency:
        job["dependency"] = dependency
    if tres_per_node:
        job["tres_per_node"] = tres_per_node
    if hold:
        job["hold"] = True
    return job
