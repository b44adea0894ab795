"""Pure rules of the local ``queued-batch`` executor (docs/site-runtime.md, Local executor: same
phases as Slurm — stage-in, compute, stage-out — on ordinary local processes).

Nothing here does I/O: it reads the ``prepare`` payload (docs/site-commands.md,
spec shape of docs/actions.md), names the refusal and failure codes, and maps an
Attempt's stages to the observation of docs/site-commands.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from site_runtime.domain.outcomes import failure_record as outcome_failure_record
from site_runtime.domain.outcomes import observation as outcome_observation
from site_runtime.domain.parameters import parameter_environment

STAGES = ("stage-in", "compute", "stage-out")

#: Definite refusals of a command (outcome ``refused``): nothing native exists.
REFUSALS = {
    "attempt-deadline-passed": "start after the Attempt's accepted-work deadline",
    "invalid-material": "the prepare payload or its spec cannot be run as written",
    "unsupported-local-inputs": "the local executor checks out only the action's own "
    "repository; extra ``inputs`` are refused",
    "local-wall-time-above-limit": "wallTimeSeconds exceeds RUNTIME_LOCAL_MAX_WALL_SECONDS",
    "local-request-never-fits": "resources.cpus or memoryMiB exceed the machine's CPUs or "
    "physical memory",
    "material-changed": "a second prepare for the Attempt carries different material",
    "attempt-not-prepared": "start/read-log for an Attempt this Runtime never prepared",
    "authorisation-refused": "the Site edge refused the execution (its reason code is in "
    "the message)",
    "unsupported-command-kind": "reconciled-service commands go to a Kubernetes Runtime",
}

#: ``observation.failure.code`` values of a failed Attempt.
FAILURES = {
    "attempt-deadline-passed": "stage-in ended after the deadline, so compute was not "
    "launched (expiry refuses work not yet started)",
    "repository-commit-missing": "the repository does not have the pinned commit",
    "stage-in-failed": "stage-in could not fetch or check out the repository "
    "(transport, credential or LFS failure)",
    "compute-failed": "a pre-command or the command exited non-zero or died by a signal",
    "wall-time-exceeded": "compute ran longer than wallTimeSeconds and was stopped "
    "(TERM, then KILL after the grace period)",
    "stage-out-failed": "stage-out could not commit or push the results",
    "local-process-lost": "a stage's process ended without recording its exit "
    "(e.g. the host rebooted)",
    "authorisation-refused": "the Site edge refused a repository grant the stage needed",
}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)[A-Za-z0-9._/-]{1,200}$")
MAX_ARGV = 256
MAX_ARG_CHARS = 4096
MAX_SHELL_CHARS = 16 * 1024
DEFAULT_WALL_SECONDS = 3600


class InvalidMaterial(ValueError):
    """The payload cannot be run; ``code`` is one of :data:`REFUSALS`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Step:
    """One process to run: exact ``argv`` (no shell) or, only when the spec says so,
    ``shell`` text run as ``/bin/sh -c``."""

    argv: tuple[str, ...] | None = None
    shell: str | None = None

    def to_argv(self) -> list[str]:
        """The exact argument vector to execute."""
        if self.argv is not None:
            return list(self.argv)
        return ["/bin/sh", "-c", self.shell or ""]

    def to_json(self) -> dict[str, Any]:
        """The step in the spec's own shape (``{argv}`` or ``{shell}``)."""
        return {"argv": list(self.argv)} if self.argv is not None else {"shell": self.shell}


@dataclass(frozen=True)
class LocalJob:
    """What one Attempt runs locally, read from the ``prepare`` payload.

    ``wall_time_seconds`` bounds compute (pre-commands included).
    """

    repository_url: str
    commit: str
    branch: str
    steps: tuple[Step, ...]
    wall_time_seconds: int
    environment: dict[str, str] = field(default_factory=dict)
    working_directory: str = "."
    material_digest: str = ""
    member: dict[str, str] = field(default_factory=dict)
    deadline: datetime | None = None

    def deadline_passed(self, now: datetime) -> bool:
        """True when the accepted-work deadline is at or before ``now`` (aware UTC)."""
        return self.deadline is not None and self.deadline <= now


def _step(raw: Any, where: str) -> Step:
    if isinstance(raw, list):
        raw = {"argv": raw}
    if not isinstance(raw, dict) or len(raw) != 1:
        raise InvalidMaterial(
            "invalid-material", f"{where} must be {{argv: [...]}} or {{shell: ...}}"
        )
    if "argv" in raw:
        argv = raw["argv"]
        if (
            not isinstance(argv, list)
            or not 1 <= len(argv) <= MAX_ARGV
            or not all(
                isinstance(a, str) and len(a) <= MAX_ARG_CHARS and "\0" not in a for a in argv
            )
        ):
            raise InvalidMaterial("invalid-material", f"{where}.argv must be 1..{MAX_ARGV} strings")
        return Step(argv=tuple(argv))
    shell = raw.get("shell")
    if not isinstance(shell, str) or not shell or len(shell) > MAX_SHELL_CHARS or "\0" in shell:
        raise InvalidMaterial("invalid-material", f"{where}.shell must be 1..16384 characters")
    return Step(shell=shell)


_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Machine:
    """What the local machine has: CPUs and physical memory (MiB)."""

    cpus: int
    memory_mib: int


def never_fits(resources: Any, machine: Machine) -> str | None:
    """Why ``resources`` can never run on ``machine`` (cpus or memoryMiB above what it
    has), naming the resource, what was asked, what the machine has and the key to
    lower; None when it fits. GPUs and nodes are not checked (the local executor does
    not enforce them)."""
    if not isinstance(resources, dict):
        return None
    asked = [("cpus", resources.get("cpus"), machine.cpus, "CPUs"),
             ("memoryMiB", resources.get("memoryMiB"), machine.memory_mib, "MiB of memory")]
    for key, value, has, unit in asked:
        if isinstance(value, int) and not isinstance(value, bool) and value > has:
            return (f"resources.{key} {value} can never fit this machine, which has {has} {unit}; "
                    f"lower resources.{key} in actions.yaml to at most {has}")
    return None


def prepared_job(
    run_id: str, attempt_id: str, payload: dict[str, Any], max_wall_seconds: int | None,
    machine: Machine | None = None,
) -> LocalJob:
    """The job a ``prepare`` command may save: safe run and attempt ids, the
    ``queued-batch`` family, a payload :func:`parse_job` reads and, given ``machine``,
    resources it can hold (``local-request-never-fits``). Raises :class:`InvalidMaterial`."""
    if not _ID.match(attempt_id) or not _ID.match(run_id):
        raise InvalidMaterial("invalid-material", "malformed run or attempt id")
    if payload.get("family", "queued-batch") != "queued-batch":
        raise InvalidMaterial(
            "invalid-material", "the local executor runs queued-batch actions only"
        )
    job = parse_job(payload, max_wall_seconds)
    spec = payload.get("spec") or {}
    why = never_fits(spec.get("resources"), machine) if machine is not None else None
    if why is not None:
        raise InvalidMaterial("local-request-never-fits", why)
    return job


def parse_job(payload: dict[str, Any], max_wall_seconds: int | None = None) -> LocalJob:
    """Read a ``prepare`` payload (docs/site-commands.md) into a :class:`LocalJob`.

    Accepts ``spec.command`` as ``{"argv": [...]}``, ``{"shell": "..."}`` or a bare
    list (argv); ``spec.preCommands`` as a list of those. Raises
    :class:`InvalidMaterial` (``invalid-material``, ``unsupported-local-inputs``,
    ``local-wall-time-above-limit``).
    """
    spec = payload.get("spec")
    if not isinstance(spec, dict):
        raise InvalidMaterial("invalid-material", "the payload has no spec object")
    repo = payload.get("repository")
    if not isinstance(repo, dict):
        raise InvalidMaterial("invalid-material", "the payload has no repository")
    url, commit, branch = repo.get("url"), repo.get("commit"), repo.get("branch")
    # An absolute path is what `metallo action run ./repo` records (development), and
    # git reads it as it reads file:///path (a Run of one must not be refused).
    if not isinstance(url, str) or not url.startswith(("https://", "file:///", "/")):
        raise InvalidMaterial(
            "invalid-material",
            "repository.url must be https://, file:/// or an absolute path on the Site",
        )
    if not isinstance(commit, str) or not _HEX40.match(commit):
        raise InvalidMaterial("invalid-material", "repository.commit must be 40 hex digits")
    if not isinstance(branch, str) or not _BRANCH.match(branch):
        raise InvalidMaterial("invalid-material", "repository.branch is missing or malformed")
    if spec.get("inputs"):
        raise InvalidMaterial(
            "unsupported-local-inputs", "the local executor does not check out extra inputs"
        )
    if "command" not in spec:
        raise InvalidMaterial("invalid-material", "spec.command is required")
    pre = spec.get("preCommands") or []
    if not isinstance(pre, list):
        raise InvalidMaterial("invalid-material", "spec.preCommands must be a list")
    steps = tuple(_step(p, f"spec.preCommands[{i}]") for i, p in enumerate(pre))
    steps += (_step(spec["command"], "spec.command"),)
    resources = spec.get("resources") or {}
    wall = (
        resources.get("wallTimeSeconds", DEFAULT_WALL_SECONDS)
        if isinstance(resources, dict)
        else DEFAULT_WALL_SECONDS
    )
    if not isinstance(wall, int) or isinstance(wall, bool) or wall < 1:
        raise InvalidMaterial(
            "invalid-material", "resources.wallTimeSeconds must be a positive integer"
        )
    if max_wall_seconds is not None and wall > max_wall_seconds:
        raise InvalidMaterial(
            "local-wall-time-above-limit",
            f"wallTimeSeconds {wall} exceeds this Site's {max_wall_seconds}",
        )
    runtime = spec.get("runtime") or {}
    if not isinstance(runtime, dict):
        raise InvalidMaterial("invalid-material", "spec.runtime must be an object")
    env = runtime.get("environment") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str)
        and _ENV_NAME.match(k)
        and not k.startswith("METALLO_")
        and isinstance(v, str)
        and "\0" not in v
        for k, v in env.items()
    ):
        raise InvalidMaterial("invalid-material", "runtime.environment must map names to text")
    env = {**env, **parameter_environment(spec, InvalidMaterial)}
    workdir = runtime.get("workingDirectory", ".")
    if (
        not isinstance(workdir, str)
        or workdir.startswith("/")
        or ".." in workdir.split("/")
        or "\0" in workdir
    ):
        raise InvalidMaterial(
            "invalid-material", "runtime.workingDirectory must stay inside the checkout"
        )
    member = payload.get("member") if isinstance(payload.get("member"), dict) else {}
    deadline = None
    if payload.get("deadline") is not None:
        raw = payload["deadline"]
        try:
            deadline = datetime.fromisoformat(str(raw))
        except ValueError:
            raise InvalidMaterial("invalid-material", "the deadline is not a timestamp") from None
        if deadline.tzinfo is None:
            raise InvalidMaterial("invalid-material", "the deadline has no time zone")
    return LocalJob(
        repository_url=url,
        commit=commit,
        branch=branch,
        steps=steps,
        wall_time_seconds=wall,
        environment=dict(env),
        working_directory=workdir or ".",
        material_digest=str(payload.get("material_digest") or ""),
        member={k: str(v) for k, v in member.items() if isinstance(v, (str, int))},
        deadline=deadline,
    )


@dataclass(frozen=True)
class StageFacts:
    """What the journal knows of one stage: ``state`` is ``launching``, ``running``,
    ``succeeded``, ``failed`` or ``cancelled``; exit facts once it ended."""

    stage: str
    state: str
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    code: str | None = None
    output_commit: str | None = None


#: Attempt states of the local journal and the observation phase each maps to.
PHASE_OF_STATE = {
    "prepared": "prepared",
    "waiting": "queued",  # started, waiting for a free local slot
    "stage-in": "queued",
    "compute": "running",
    "stage-out": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "cancelled",
}

#: The native state of a journal state, in the words a scheduler uses (PENDING, RUNNING,
#: COMPLETED, …); which stage runs is ``native_stage``'s to say, not the state's.
NATIVE_STATE = {
    "prepared": "PREPARED",
    "waiting": "PENDING",
    "stage-in": "RUNNING",
    "compute": "RUNNING",
    "stage-out": "RUNNING",
    "succeeded": "COMPLETED",
    "failed": "FAILED",
    "cancelled": "CANCELLED",
}


def failure_record(stage: StageFacts) -> dict[str, Any]:
    """The bounded failure record of a local stage (:func:`~.outcomes.failure_record`):
    its pid as job id, ``TIMEOUT`` for a wall-time kill, ``CANCELLED`` for a stopped
    stage, else ``FAILED``; the stage's code or its default."""
    scheduler_state = (
        "TIMEOUT"
        if stage.code == "wall-time-exceeded"
        else ("CANCELLED" if stage.state == "cancelled" else "FAILED")
    )
    return outcome_failure_record(
        stage.stage,
        scheduler_state,
        str(stage.pid) if stage.pid else None,
        stage.exit_code,
        stage.signal,
        stage.code or default_failure_code(stage.stage),
    )


def default_failure_code(stage: str) -> str:
    """The failure code of a stage that failed without a more precise one."""
    return {
        "stage-in": "stage-in-failed",
        "compute": "compute-failed",
        "stage-out": "stage-out-failed",
    }[stage]


def observation(state: str, stages: list[StageFacts], observed_at: str) -> dict[str, Any]:
    """The observation of an Attempt in journal ``state`` (docs/site-commands.md):
    ``queued`` during stage-in, ``running`` from compute start through stage-out,
    then the terminal phase with the failing stage's record or the output commit.
    ``native_stage`` is the stage running now, the one that failed or was stopped,
    or stage-out once it succeeded; None before stage-in."""
    by_stage = {s.stage: s for s in stages}
    native_stage = state if state in STAGES else None
    ended = next((s for s in stages if s.state in ("failed", "cancelled")), None)
    if state in ("failed", "cancelled") and ended is not None:
        native_stage = ended.stage
    elif state == "succeeded":
        native_stage = "stage-out"
    failure = None
    exit_code = signal = None
    if state == "failed":
        failed = next((s for s in stages if s.state in ("failed", "cancelled")), None)
        if failed is not None:
            failure = failure_record(failed)
            exit_code, signal = failed.exit_code, failed.signal
    if state == "cancelled":
        # How the stopped step ended (e.g. signal 15), as the stage log says.
        stopped = next((s for s in stages if s.state == "cancelled"), None)
        if stopped is not None:
            exit_code, signal = stopped.exit_code, stopped.signal
    compute = by_stage.get("compute")
    if state == "succeeded" and compute is not None:
        exit_code, signal = compute.exit_code, compute.signal
    out = by_stage.get("stage-out")
    return outcome_observation(
        PHASE_OF_STATE[state],
        observed_at,
        native_state=NATIVE_STATE[state],
        exit_code=exit_code,
        signal=signal,
        failure=failure,
        output_commit=out.output_commit if out is not None and state == "succeeded" else None,
        native_stage=native_stage,
    )


def native_jobs(stages: list[StageFacts]) -> list[dict[str, Any]]:
    """``native_jobs`` of a result: one entry per launched stage, job id = its pid."""
    return [{"stage": s.stage, "job_id": str(s.pid)} for s in stages if s.pid]
