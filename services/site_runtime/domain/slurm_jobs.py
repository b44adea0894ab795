"""A Slurm job's identity and exact request (docs/site-runtime.md, Slurm executor).

Three jobs per Attempt, ``<prefix>-<attempt>-in``, ``<prefix>-<attempt>`` and
``<prefix>-<attempt>-out``, each with the comment ``<prefix>:<run>:<attempt>:<stage>``,
the binding's account and user, ``requeue: false`` and ``afterok`` on the stage
before. The identity is what finds a job again after a lost answer; the request
is saved before its POST and carries no credential. Pure values; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from site_runtime.domain.slurm_stages import NAME_SUFFIX, STAGES, has_started, is_terminal

_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


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
    """The native identity of ``stage`` of an Attempt (docs/slurm-lab.md, the slurm executor)."""
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
    unknown; ``source`` is ``slurmctld`` or ``slurmdbd``; ``requeue`` whether
    slurmctld may requeue the job (None when the record does not say); ``restarts``
    how many times Slurm requeued it (``restart_cnt``; None when not said).

    A record of an array: ``array_job_id`` (None for a plain job), ``array_task``
    (the one task a split record is) or ``array_pending`` (the task range a pending
    record still holds, e.g. ``2-9%3``). :attr:`task_ids` names the ``JOBID_TASK``
    ids the record stands for.
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
    requeue: bool | None = None
    restarts: int | None = None
    array_job_id: str | None = None
    array_task: int | None = None
    array_pending: str | None = None

    @property
    def task_ids(self) -> tuple[str, ...]:
        """The ``JOBID_TASK`` ids of the array tasks this record stands for: the split
        task's own, or every task a pending record still holds; () for a plain job."""
        if self.array_job_id is None:
            return ()
        if self.array_task is not None:
            return (f"{self.array_job_id}_{self.array_task}",)
        return tuple(f"{self.array_job_id}_{i}" for i in pending_indices(self.array_pending))

    @property
    def terminal(self) -> bool:
        """True when the job has ended."""
        return is_terminal(self.state)

    @property
    def started(self) -> bool:
        """True when the job's commands run or ran (:func:`~.slurm_stages.has_started`)."""
        return has_started(self.state)


#: The most tasks one array may have (a collection's bound, seed 002 §15).
MAX_ARRAY_INDEX = 999
_RANGE = re.compile(r"^([0-9]{1,9})(?:-([0-9]{1,9}))?(?::([0-9]{1,9}))?$")


def pending_indices(task_string: str | None) -> tuple[int, ...]:
    """The task indices of a pending array record's ``array_task_string``
    (``0-9%3``, ``[1,3-5]``, ``2-8:2``); () for none or a shape not understood.
    Indices above :data:`MAX_ARRAY_INDEX` are never Metallo's and are left out."""
    if not isinstance(task_string, str):
        return ()
    text = task_string.strip().strip("[]").split("%", 1)[0]
    found: list[int] = []
    for part in filter(None, text.split(",")):
        match = _RANGE.match(part)
        if match is None:
            return ()
        first = int(match.group(1))
        last = int(match.group(2) or first)
        step = max(1, int(match.group(3) or 1))
        found.extend(range(first, min(last, MAX_ARRAY_INDEX) + 1, step))
    return tuple(sorted(set(found)))


class JobList(list[NativeJob]):
    """slurmctld's job list, indexed once by job id and by name: every Attempt of an
    observe cycle looks its jobs up in the same list, so a look-up must not scan it.
    An array task is also found by its ``JOBID_TASK`` id (:attr:`NativeJob.task_ids`):
    a split task's own record, or the array's pending record that still holds it."""

    def __init__(self, jobs: list[NativeJob]) -> None:
        super().__init__(jobs)
        self.by_id = {job.job_id: job for job in self}
        for job in self:
            for task_id in job.task_ids:
                self.by_id.setdefault(task_id, job)
        self.by_name: dict[str, list[NativeJob]] = {}
        for job in self:
            self.by_name.setdefault(job.name, []).append(job)


@dataclass(frozen=True)
class StagingSettings:
    """Resources of both Git/LFS staging jobs, saved at preparation (docs/slurm-lab.md, Settings)."""

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


def wire_job(job: dict[str, Any]) -> dict[str, Any]:
    """The ``job`` object as v0.0.38 must receive it. Its parser treats ``requeue`` as
    sbatch's ``--requeue`` flag whatever its value (``"requeue": false`` gives
    ``Requeue=1``), so a request that disables requeueing sends ``no_requeue``
    (``--no-requeue``) instead; the saved request keeps ``requeue: false``."""
    body = dict(job)
    requeue = body.pop("requeue", None)
    if requeue is False:
        body["no_requeue"] = True
    elif requeue is True:
        body["requeue"] = True
    return body
