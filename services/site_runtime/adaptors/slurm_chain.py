"""The slurm executor: one ``queued-batch`` Attempt as three dependent Slurm jobs.

Seed 000 (Staged Slurm batch execution), seed 001 (Slurm refusals, deferrals,
failure records), seed 003 (observation and immutable terminal evidence), issue 6.

``stage-in`` → ``compute`` → ``stage-out``, each joined to the stage before by
``afterok``.  A stage is submitted when the stage before has completed (so a
restart after a completed stage-in resumes with compute without cloning again,
and each staging job gets a just-in-time repository grant).

Every stage moves ``prepared`` → ``submitting`` (intent and exact request saved
before the POST) → ``held`` (job id saved) → ``submitted`` (released).  Jobs are
submitted *held* and released only once their id is saved, so a submission
whose answer was lost is settled by an exact-identity lookup: a held job with
the stage's name, comment, account and user is adopted; several stop progress;
none in slurmctld (where a held job cannot have finished) means the POST never
created a job, and the saved request is sent again — any late duplicate stays
held, never runs, and is cancelled by the next observation.

The member token is fetched through :class:`MemberTokens` and verified before
every native request (``SlurmRest``); it is never written to the journal, a log
line, an exception, an environment or a script.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from metallo.identity.verify import JwksUnavailable, MemberCredential, MemberTokenRejected

from site_runtime.adaptors.slurm_access import (
    SlurmLimited,
    SlurmRefused,
    SlurmRest,
    SlurmUncertain,
    SlurmUnreachable,
)
from site_runtime.adaptors.slurm_edge import (
    EdgeRefused,
    EdgeUnavailable,
    ExecutionAuthority,
    MemberTokens,
    RepositoryGrant,
    RepositoryGrants,
)
from site_runtime.adaptors.slurm_job_model import (
    STAGES,
    NativeJob,
    StagingSettings,
    check_identifier,
    job_request,
    stage_identity,
)
from site_runtime.adaptors.slurm_journal import AttemptRow, SlurmJournal, StageRow
from site_runtime.adaptors.slurm_scripts import (
    EXIT_CODES,
    OUTPUT_COMMIT_MARK,
    SCRIPT_VERSION,
    SCRIPTS,
)
from site_runtime.adaptors.slurm_settings import SlurmSettings
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand

log = logging.getLogger("metallo.site_runtime.slurm")

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}(?<![./])$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_RESERVED_ENV = ("METALLO_", "SLURM_", "GIT_")
MAX_COMMAND_BYTES = 1024 * 1024
MAX_LOG_BYTES = 5 * 1024 * 1024
SCHEDULER_FAILURE_CODES = {
    "TIMEOUT": "wall-time-exceeded",
    "OUT_OF_MEMORY": "out-of-memory",
    "NODE_FAIL": "node-failure",
    "BOOT_FAIL": "node-failure",
    "DEADLINE": "scheduler-deadline",
    "PREEMPTED": "preempted",
}


class Refusal(Exception):
    """A definite refusal of a command (``code``), made before any native effect."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _now_iso(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _slurm_time(now: float) -> str:
    """A UTC time as slurmdbd's query parser takes it (no zone suffix)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _deadline(value: Any) -> float | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise Refusal("invalid-material", "the deadline is not a timestamp")
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise Refusal("invalid-material", "the deadline is not a timestamp") from None


def _commands(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """preCommands then command, each ``{"argv": [...]}`` or ``{"shell": "..."}``."""
    items = list(spec.get("preCommands") or [])
    if "command" not in spec:
        raise Refusal("invalid-material", "the action has no command")
    items.append(spec["command"])
    out = []
    for item in items:
        if isinstance(item, list):
            item = {"argv": item}
        if not isinstance(item, dict):
            raise Refusal("invalid-material", "a command has an unknown form")
        if "argv" in item:
            argv = item["argv"]
            if (
                not isinstance(argv, list)
                or not argv
                or not all(isinstance(a, str) and "\x00" not in a for a in argv)
            ):
                raise Refusal("invalid-material", "an argv is not a list of strings")
            out.append({"argv": list(argv)})
        elif "shell" in item:
            if not isinstance(item["shell"], str) or "\x00" in item["shell"] or not item["shell"]:
                raise Refusal("invalid-material", "a shell command is not text")
            out.append({"shell": item["shell"]})
        else:
            raise Refusal("invalid-material", "a command has neither argv nor shell")
    return out


class SlurmExecutor:
    """``QueuedBatchExecutor`` on Slurm through slurmrestd (seed 000).

    ``fault`` is called with a step name at each recovery point
    (``intent:<stage>``, ``posted:<stage>``, ``held:<stage>``, ``cancel-intent``,
    ``cancelled:<stage>``); the default does nothing, tests use it to stop the
    process at exactly that point.
    """

    def __init__(
        self,
        *,
        settings: SlurmSettings,
        journal: SlurmJournal,
        rest: SlurmRest,
        tokens: MemberTokens,
        grants: RepositoryGrants,
        authority: ExecutionAuthority | None = None,
        clock: Callable[[], float] = time.time,
        fault: Callable[[str], None] = lambda step: None,
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.rest = rest
        self.tokens = tokens
        self.grants = grants
        self.authority = authority
        self.clock = clock
        self.fault = fault
        self._locks: dict[str, asyncio.Lock] = {}
        # Repository grants live only in memory, for the submission that uses them.
        self._grant_tokens: dict[tuple[str, str], RepositoryGrant] = {}

    def _lock(self, attempt_id: str) -> asyncio.Lock:
        return self._locks.setdefault(attempt_id, asyncio.Lock())

    # ================================================================== commands
    async def prepare(self, command: SiteCommand) -> CommandResult:
        """Save the Attempt and three ``prepared`` stages; refuse what cannot run here.

        Refusals (before any workspace effect): ``unsupported-slurm-accelerator-class``,
        ``slurm-wall-time-above-limit``, ``unsupported-slurm-inputs``,
        ``invalid-material``, ``binding-changed``.
        """
        saved = self.journal.result(command.command_id)
        if saved is not None:
            return CommandResult(**saved)
        async with self._lock(command.attempt_id):
            try:
                record = self._prepared_record(command)
            except Refusal as refusal:
                return self._save(
                    command,
                    CommandResult(command.command_id, "refused", refusal.code, str(refusal)),
                )
            existing = self.journal.attempt(command.attempt_id)
            if existing is None:
                refused = await self._authorise(command.run_id, command.attempt_id, record)
                if refused is not None:
                    return self._save(
                        command,
                        CommandResult(
                            command.command_id, "refused", "authorisation-refused", refused
                        ),
                    )
            if existing is not None:
                if existing.record["binding"] != record["binding"]:
                    return self._save(
                        command,
                        CommandResult(
                            command.command_id,
                            "refused",
                            "binding-changed",
                            "the member binding differs from the saved one",
                        ),
                    )
                if existing.record["material_digest"] != record["material_digest"]:
                    return self._save(
                        command,
                        CommandResult(
                            command.command_id,
                            "refused",
                            "idempotency-conflict",
                            "the Attempt was prepared with other material",
                        ),
                    )
            else:
                self.journal.create_attempt(
                    attempt_id=command.attempt_id,
                    run_id=command.run_id,
                    attempt_number=command.attempt_number,
                    site_id=command.site_id,
                    record=record,
                    stages=STAGES,
                )
            att = self._attempt(command.attempt_id)
            return self._save(
                command,
                CommandResult(
                    command.command_id, "succeeded", observation=self._observation(att, "prepared")
                ),
            )

    async def start(self, command: SiteCommand) -> CommandResult:
        """Submit stage-in (held, then released) and answer ``queued``.

        Refusals: ``attempt-not-prepared``, ``attempt-deadline-passed``,
        ``slurm-error-<n>``, ``member-token-rejected``.  Deferrals:
        ``slurm-submission-limited``, ``slurm-unavailable``,
        ``slurm-observation-unavailable``, ``identity-provider-unavailable``,
        ``repository-unavailable``.
        """
        saved = self.journal.result(command.command_id)
        if saved is not None:
            return CommandResult(**saved)
        async with self._lock(command.attempt_id):
            att = self.journal.attempt(command.attempt_id)
            if att is None:
                return CommandResult(
                    command.command_id,
                    "refused",
                    "attempt-not-prepared",
                    "the Attempt was not prepared at this Site",
                )
            if att.outcome is not None or att.cancel_state is not None:
                return await self._observe_locked(command, att)
            stage_in = self.journal.stages(att.attempt_id)["stage-in"]
            if stage_in.state == "refused":
                refusal = stage_in.refusal or {}
                return self._save(
                    command,
                    CommandResult(
                        command.command_id,
                        "refused",
                        refusal.get("code"),
                        "Slurm refused the stage-in job",
                    ),
                )
            if stage_in.state == "prepared":
                refused = await self._authorise(att.run_id, att.attempt_id, att.record)
                if refused is not None:
                    return self._save(
                        command,
                        CommandResult(
                            command.command_id, "refused", "authorisation-refused", refused
                        ),
                    )
                deadline = att.record.get("deadline_epoch")
                if deadline is not None and self.clock() >= deadline:
                    return self._save(
                        command,
                        CommandResult(
                            command.command_id,
                            "refused",
                            "attempt-deadline-passed",
                            "the Attempt's accepted-work deadline has passed",
                        ),
                    )
            try:
                credential = await self._credential(att)
                await self._ensure_submitted(att, "stage-in", None, credential)
            except SlurmRefused as refused:
                return self._save(
                    command,
                    CommandResult(
                        command.command_id,
                        "refused",
                        refused.code,
                        "Slurm refused the stage-in job",
                    ),
                )
            except _DeadlinePassed:
                return self._save(
                    command,
                    CommandResult(
                        command.command_id,
                        "refused",
                        "attempt-deadline-passed",
                        "the Attempt's accepted-work deadline has passed",
                    ),
                )
            except MemberTokenRejected as rejected:
                log.warning(
                    "attempt %s: member token rejected (%s)", att.attempt_id, rejected.reason
                )
                return self._save(
                    command,
                    CommandResult(
                        command.command_id,
                        "refused",
                        "member-token-rejected",
                        f"the member token was refused ({rejected.reason})",
                    ),
                )
            att = self._attempt(att.attempt_id)
            return self._save(
                command,
                CommandResult(
                    command.command_id,
                    "succeeded",
                    native_jobs=self._native_jobs(att.attempt_id),
                    observation=self._observation(
                        att, "queued", native_state=self._native_state(att.attempt_id)
                    ),
                ),
            )

    async def observe(self, command: SiteCommand) -> CommandResult:
        """Observe the chain, submit the next stage when its predecessor completed.

        Phases: ``queued`` (stage-in, compute pending), ``running`` (compute
        started, stage-out; never back), ``succeeded``/``failed``/``cancelled``
        once decided and cleaned up.  One native list request serves every
        Attempt observed within the list cache time.
        """
        async with self._lock(command.attempt_id):
            att = self.journal.attempt(command.attempt_id)
            if att is None:
                return CommandResult(
                    command.command_id,
                    "refused",
                    "attempt-not-prepared",
                    "the Attempt was not prepared at this Site",
                )
            return await self._observe_locked(command, att)

    async def cancel(self, command: SiteCommand) -> CommandResult:
        """Cancel the whole chain, newest job first; the exact result is saved and replayed.

        ``message`` is ``accepted``, ``already-terminal`` or ``not-found``.
        """
        saved = self.journal.result(command.command_id)
        if saved is not None:
            return CommandResult(**saved)
        async with self._lock(command.attempt_id):
            att = self.journal.attempt(command.attempt_id)
            if att is None:
                return self._save(
                    command, CommandResult(command.command_id, "succeeded", message="not-found")
                )
            if att.cancel_result is not None:
                return self._save(command, self._cancel_result(command, att))
            if att.cancel_state is None:
                self.journal.update_attempt(att.attempt_id, cancel_state="requested")
            self.fault("cancel-intent")
            att = self._attempt(att.attempt_id)
            result = await self._cancel_chain(att)
            self.journal.update_attempt(att.attempt_id, cancel_result=result, cancel_state="done")
            att = self._attempt(att.attempt_id)
            return self._save(command, self._cancel_result(command, att))

    async def recover(self, command: SiteCommand) -> CommandResult:
        """Finish a command journaled as in flight before a restart (same paths, idempotent)."""
        handlers = {
            "prepare": self.prepare,
            "start": self.start,
            "observe": self.observe,
            "cancel": self.cancel,
            "read-log": self.read_log,
        }
        handler = handlers.get(command.kind)
        if handler is None:
            return CommandResult(
                command.command_id,
                "refused",
                "unsupported-command",
                "the slurm executor does not handle this command",
            )
        return await handler(command)

    async def read_log(self, command: SiteCommand) -> CommandResult:
        """The tail of one stage's Attempt-scoped log (at most ``max_bytes``, ≤ 5 MiB)."""
        stage = command.payload.get("stage", "compute")
        if stage not in STAGES:
            return CommandResult(command.command_id, "refused", "unknown-stage", "no such stage")
        try:
            max_bytes = min(int(command.payload.get("max_bytes", MAX_LOG_BYTES)), MAX_LOG_BYTES)
        except (TypeError, ValueError):
            return CommandResult(
                command.command_id, "refused", "invalid-request", "max_bytes is not a number"
            )
        if self.journal.attempt(command.attempt_id) is None:
            return CommandResult(
                command.command_id,
                "refused",
                "attempt-not-prepared",
                "the Attempt was not prepared at this Site",
            )
        try:
            data, size = _read_tail(self._log_path(command.attempt_id, stage), max_bytes)
        except OSError:
            raise Deferred("workspace-unavailable", "the log cannot be read now") from None
        return CommandResult(
            command.command_id,
            "succeeded",
            observation={
                "log": {
                    "stage": stage,
                    "text": data.decode("utf-8", "replace"),
                    "truncated": size > len(data),
                }
            },
        )

    async def _authorise(self, run_id: str, attempt_id: str, record: dict[str, Any]) -> str | None:
        """Ask current authority for a new native effect: None, or the refusal's reason."""
        if self.authority is None:
            return None
        binding = record["binding"]
        request = {
            "run_id": run_id,
            "attempt_id": attempt_id,
            "material_digest": record.get("material_digest") or "",
            "member_id": binding.get("member") or "",
            "site_username": binding["user"],
            "account": binding["account"],
        }
        try:
            await self.authority.authorise_execution(request)
        except EdgeUnavailable:
            raise Deferred("authority-unavailable", "authorisation cannot be confirmed") from None
        except EdgeRefused as error:
            return f"authority refused ({error.code})"
        return None

    # ================================================================== preparation
    def _prepared_record(self, command: SiteCommand) -> dict[str, Any]:
        p = command.payload
        try:
            check_identifier(command.attempt_id, "attempt id")
            check_identifier(command.run_id, "run id")
        except ValueError as error:
            raise Refusal("invalid-material", str(error)) from None
        if command.environment != "slurm" or p.get("family", "queued-batch") != "queued-batch":
            raise Refusal("invalid-material", "the slurm executor runs queued-batch actions only")
        spec = p.get("spec")
        member = p.get("member")
        repository = p.get("repository")
        if (
            not isinstance(spec, dict)
            or not isinstance(member, dict)
            or not isinstance(repository, dict)
        ):
            raise Refusal("invalid-material", "spec, member and repository are required")
        user, account = member.get("site_username"), member.get("account")
        if not isinstance(user, str) or not _USER.match(user):
            raise Refusal("invalid-material", "the binding's site username is not usable")
        if not isinstance(account, str) or not re.match(r"^[A-Za-z0-9_.-]{1,64}$", account):
            raise Refusal("invalid-material", "the binding's account is not usable")
        resources = spec.get("resources") or {}
        gpus = int(resources.get("gpus") or 0)
        gres = None
        if gpus > 0:
            gpu_class = resources.get("gpuClass")
            if not isinstance(gpu_class, str) or gpu_class not in self.settings.gpu_gres:
                raise Refusal(
                    "unsupported-slurm-accelerator-class",
                    "the Site offers no GRES for this GPU class",
                )
            gres = self.settings.gpu_gres[gpu_class]
            if not gres.startswith("gres:"):
                gres = f"gres:{gres}"
            gres = f"{gres}:{gpus}"
        wall = int(resources.get("wallTimeSeconds") or 3600)
        if self.settings.max_wall_seconds is not None and wall > self.settings.max_wall_seconds:
            raise Refusal("slurm-wall-time-above-limit", "the wall time is above the Site's limit")
        if spec.get("inputs"):
            raise Refusal("unsupported-slurm-inputs", "input mounts are not supported on Slurm")
        commands = _commands(spec)
        if (
            sum(len(a.encode()) for c in commands for a in c.get("argv", [c.get("shell", "")]))
            > MAX_COMMAND_BYTES
        ):
            raise Refusal("invalid-material", "the commands are too large")
        runtime = spec.get("runtime") or {}
        env = runtime.get("environment") or {}
        if not isinstance(env, dict):
            raise Refusal("invalid-material", "the environment is not a mapping")
        for name, value in env.items():
            if (
                not _ENV_NAME.match(name)
                or name.startswith(_RESERVED_ENV)
                or not isinstance(value, str)
                or "\x00" in value
            ):
                raise Refusal("invalid-material", "an environment variable is not allowed")
        workdir = runtime.get("workingDirectory", ".") or "."
        if workdir.startswith("/") or ".." in Path(workdir).parts:
            raise Refusal("invalid-material", "the working directory leaves the checkout")
        url, commit = repository.get("url"), repository.get("commit")
        branch = repository.get("branch") or "main"
        output_branch = repository.get("output_branch") or branch
        if not isinstance(url, str) or not url or url.startswith("-") or len(url) > 2048:
            raise Refusal("invalid-material", "the repository URL is not usable")
        if not isinstance(commit, str) or not _COMMIT.match(commit):
            raise Refusal("invalid-material", "the repository commit is not 40 hex digits")
        for b in (branch, output_branch):
            if not isinstance(b, str) or not _BRANCH.match(b):
                raise Refusal("invalid-material", "a branch name is not usable")
        return {
            "material_digest": p.get("material_digest"),
            "binding": {"member": member.get("id"), "user": user, "account": account},
            "repository": {
                "url": url,
                "commit": commit,
                "branch": branch,
                "output_branch": output_branch,
            },
            "commands": commands,
            "environment": dict(sorted(env.items())),
            "working_directory": workdir,
            "compute": {
                "partition": self.settings.compute_partition,
                "cpus": int(resources.get("cpus") or 1),
                "memory_mib": int(resources.get("memoryMiB") or 1024),
                "nodes": int(resources.get("nodes") or 1),
                "time_minutes": max(1, math.ceil(wall / 60)),
                "tres_per_node": gres,
            },
            "staging": self.settings.staging.to_json(),
            "prefix": self.settings.name_prefix,
            "workspace_root": str(self.settings.workspace_root),
            "repository_ca": self.settings.repository_ca_file,
            "deadline": p.get("deadline"),
            "deadline_epoch": _deadline(p.get("deadline")),
            "script_version": SCRIPT_VERSION,
            "prepared_at": self.clock(),
        }

    # ================================================================== rendering
    def _workspace(self, att: AttemptRow) -> str:
        return f"{att.record['workspace_root']}/{att.attempt_id}"

    def _log_path(self, attempt_id: str, stage: str) -> Path:
        att = self.journal.attempt(attempt_id)
        root = att.record["workspace_root"] if att else str(self.settings.workspace_root)
        return Path(root) / f"{attempt_id}.{stage}.log"

    def _identity(self, att: AttemptRow, stage: str):
        b = att.record["binding"]
        return stage_identity(
            att.record["prefix"], att.run_id, att.attempt_id, stage, b["account"], b["user"]
        )

    def _render(self, att: AttemptRow, stage: str, after: str | None) -> dict[str, Any]:
        """The exact request of ``stage`` (no credentials): script and job."""
        r = att.record
        ws = self._workspace(att)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": ws,
            "METALLO_STAGE": stage,
            "METALLO_WORKSPACE": ws,
            "METALLO_ATTEMPT_ID": att.attempt_id,
            "METALLO_RUN_ID": att.run_id,
        }
        if stage == "compute":
            env.update(r["environment"])
            env["METALLO_WORKDIR"] = r["working_directory"]
            env["METALLO_CMD_COUNT"] = str(len(r["commands"]))
            for i, c in enumerate(r["commands"]):
                if "shell" in c:
                    env[f"METALLO_CMD_{i}_SHELL"] = c["shell"]
                else:
                    env[f"METALLO_CMD_{i}_ARGC"] = str(len(c["argv"]))
                    for j, arg in enumerate(c["argv"]):
                        env[f"METALLO_CMD_{i}_ARG_{j}"] = arg
            res = r["compute"]
            partition, cpus, memory, minutes, nodes = (
                res["partition"],
                res["cpus"],
                res["memory_mib"],
                res["time_minutes"],
                res["nodes"],
            )
            tres = res.get("tres_per_node")
        else:
            staging = StagingSettings.from_json(r["staging"])
            env["METALLO_REPOSITORY_URL"] = r["repository"]["url"]
            if r.get("repository_ca"):
                env["METALLO_REPOSITORY_CA"] = r["repository_ca"]
            if stage == "stage-in":
                env["METALLO_COMMIT"] = r["repository"]["commit"]
                env["METALLO_BRANCH"] = r["repository"]["branch"]
            else:
                env["METALLO_OUTPUT_BRANCH"] = r["repository"]["output_branch"]
                env["METALLO_COMMIT_MESSAGE"] = (
                    f"Metallo run {att.run_id} attempt {att.attempt_number}"
                )
            partition, cpus, memory, minutes, nodes = (
                staging.partition,
                staging.cpus,
                staging.memory_mib,
                staging.time_minutes,
                1,
            )
            tres = None
        job = job_request(
            identity=self._identity(att, stage),
            partition=partition,
            cpus=cpus,
            memory_mib=memory,
            time_minutes=minutes,
            nodes=nodes,
            dependency=f"afterok:{after}" if after else None,
            working_directory=r["workspace_root"],
            standard_output=str(self._log_path(att.attempt_id, stage)),
            environment=env,
            tres_per_node=tres,
            hold=True,
        )
        return {"script_version": SCRIPT_VERSION, "script": SCRIPTS[stage], "job": job}

    # ================================================================== submission
    async def _credential(self, att: AttemptRow) -> MemberCredential:
        try:
            return await self.tokens.member_token(att.attempt_id)
        except EdgeUnavailable as error:
            raise Deferred(error.code, "no member token now") from None
        except EdgeRefused as error:
            raise Deferred(
                "identity-provider-unavailable", f"member token refused ({error.code})"
            ) from None

    async def _ensure_submitted(
        self, att: AttemptRow, stage: str, after: str | None, credential: MemberCredential
    ) -> str:
        """Bring ``stage`` to ``submitted`` (released) and return its job id."""
        try:
            return await self._submit_steps(att, stage, after, credential)
        except JwksUnavailable:
            raise Deferred(
                "identity-provider-unavailable", "the issuer's keys are unavailable"
            ) from None
        except SlurmUnreachable:
            raise Deferred("slurm-unavailable", "slurmrestd refused the connection") from None
        except SlurmUncertain:
            raise Deferred(
                "slurm-observation-unavailable", "Slurm could not be asked now"
            ) from None

    async def _submit_steps(
        self, att: AttemptRow, stage: str, after: str | None, credential: MemberCredential
    ) -> str:
        user = att.record["binding"]["user"]
        row = self.journal.stages(att.attempt_id)[stage]
        if row.state == "submitting":
            row = await self._settle_uncertain(att, row, credential)
        if row.state == "prepared":
            row = await self._post(att, stage, after, credential)
        if row.state == "held":
            await self.rest.release(row.job_id, credential=credential, user=user)
            self.journal.update_stage(att.attempt_id, stage, state="submitted")
            row = self.journal.stages(att.attempt_id)[stage]
        if row.state != "submitted" or row.job_id is None:
            raise Deferred("slurm-observation-unavailable", "the stage is not submitted yet")
        return row.job_id

    async def _post(
        self, att: AttemptRow, stage: str, after: str | None, credential: MemberCredential
    ) -> StageRow:
        user = att.record["binding"]["user"]
        secret_env: dict[str, str] = {}
        if stage in ("stage-in", "stage-out"):
            grant = await self._grant(att, stage)
            secret_env = {
                "METALLO_GIT_USERNAME": grant.username,
                "METALLO_GIT_PASSWORD": grant.token,
            }
        request = self._render(att, stage, after)
        # A local SQLite write (well under a millisecond) blocks the loop less than a
        # hand-off to a worker thread costs.
        self.journal.update_stage(att.attempt_id, stage, state="submitting", request=request)
        self.fault(f"intent:{stage}")

        def deadline_check() -> None:
            deadline = att.record.get("deadline_epoch")
            if (
                stage in ("stage-in", "compute")
                and deadline is not None
                and self.clock() >= deadline
            ):
                raise _DeadlinePassed()

        try:
            submitted = await self.rest.submit(
                script=request["script"],
                job=request["job"],
                secret_environment=secret_env,
                credential=credential,
                user=user,
                before_post=deadline_check,
            )
        except _DeadlinePassed:
            self.journal.update_stage(att.attempt_id, stage, state="prepared")
            await self._release_grant(att.attempt_id, stage)
            raise
        except SlurmRefused as refused:
            self.journal.update_stage(
                att.attempt_id,
                stage,
                state="refused",
                refusal={"code": refused.code, "error_number": refused.error_number},
            )
            await self._release_grant(att.attempt_id, stage)
            raise
        except (SlurmLimited, SlurmUnreachable) as error:
            # Nothing was created: the stage goes back to prepared (seed 001).
            self.journal.update_stage(att.attempt_id, stage, state="prepared")
            await self._release_grant(att.attempt_id, stage)
            raise Deferred(error.code, "the stage will be submitted again") from None
        except (MemberTokenRejected, JwksUnavailable):
            self.journal.update_stage(att.attempt_id, stage, state="prepared")
            raise
        self.fault(f"posted:{stage}")
        self.journal.update_stage(att.attempt_id, stage, state="held", job_id=submitted.job_id)
        self.fault(f"held:{stage}")
        return self.journal.stages(att.attempt_id)[stage]

    async def _settle_uncertain(
        self, att: AttemptRow, row: StageRow, credential: MemberCredential
    ) -> StageRow:
        """Adopt a held job with the exact identity, or prove the POST created nothing."""
        user = att.record["binding"]["user"]
        identity = self._identity(att, row.stage)
        since = _slurm_time(att.created_at - 86400)
        matches = await self.rest.find(identity, since_iso=since, credential=credential, user=user)
        if len(matches) > 1:
            held = [m for m in matches if m.state == "PENDING" and not m.terminal]
            if len(held) == len(matches):
                # Only held duplicates (never released, never ran): keep the oldest.
                keep = min(matches, key=lambda m: int(m.job_id))
                for extra in matches:
                    if extra.job_id != keep.job_id:
                        await self.rest.cancel(extra.job_id, credential=credential, user=user)
                matches = [keep]
            else:
                log.error(
                    "attempt %s %s: %d jobs carry its identity; progress stops",
                    att.attempt_id,
                    row.stage,
                    len(matches),
                )
                raise Deferred(
                    "slurm-observation-unavailable", "several jobs carry the stage's identity"
                )
        if len(matches) == 1:
            job = matches[0]
            state = (
                "held" if job.state == "PENDING" and job.reason == "JobHeldUser" else "submitted"
            )
            self.journal.update_stage(att.attempt_id, row.stage, state=state, job_id=job.job_id)
            log.info(
                "attempt %s %s: adopted job %s by exact identity",
                att.attempt_id,
                row.stage,
                job.job_id,
            )
        else:
            # slurmctld keeps every held job until it is released or cancelled, and we
            # release only after saving the id: no job means the POST created nothing.
            self.journal.update_stage(att.attempt_id, row.stage, state="prepared")
            await self._release_grant(att.attempt_id, row.stage)
        return self.journal.stages(att.attempt_id)[row.stage]

    async def _grant(self, att: AttemptRow, stage: str) -> RepositoryGrant:
        row = self.journal.stages(att.attempt_id)[stage]
        if row.grant_state in ("requested", "issued"):
            await self._release_grant(att.attempt_id, stage)
        self.journal.update_stage(att.attempt_id, stage, grant_state="requested", grant_id=None)
        direction = "stage-in" if stage == "stage-in" else "stage-out"
        try:
            grant = await self.grants.issue(att.attempt_id, direction)
        except EdgeUnavailable as error:
            self.journal.update_stage(att.attempt_id, stage, grant_state="none")
            raise Deferred(error.code, "no repository grant now") from None
        except EdgeRefused as error:
            self.journal.update_stage(att.attempt_id, stage, grant_state="none")
            raise Deferred(
                "repository-unavailable", f"repository grant refused ({error.code})"
            ) from None
        self.journal.update_stage(
            att.attempt_id, stage, grant_state="issued", grant_id=grant.grant_id
        )
        self._grant_tokens[(att.attempt_id, stage)] = grant
        return grant

    async def _release_grant(self, attempt_id: str, stage: str) -> None:
        row = self.journal.stages(attempt_id)[stage]
        self._grant_tokens.pop((attempt_id, stage), None)
        if row.grant_state == "issued" and row.grant_id:
            try:
                await self.grants.release(row.grant_id)
            except (EdgeUnavailable, EdgeRefused):
                return  # stays "issued"; retried with the Attempt's cleanup
            self.journal.update_stage(attempt_id, stage, grant_state="released")
        elif row.grant_state == "requested":
            # Issued or not, its id was never saved; it expires on its own.
            self.journal.update_stage(attempt_id, stage, grant_state="released")

    # ================================================================== observation
    async def _observe_locked(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        if att.outcome is not None:
            if att.cleanup_state != "done":
                await self._cleanup(att)
            return CommandResult(
                command.command_id,
                "succeeded",
                native_jobs=self._native_jobs(att.attempt_id),
                observation=att.outcome,
            )
        try:
            credential = await self._credential(att)
            return await self._advance(command, att, credential)
        except (MemberTokenRejected, JwksUnavailable) as error:
            reason = getattr(error, "reason", "keys-unavailable")
            log.warning("attempt %s: member token unusable (%s)", att.attempt_id, reason)
            raise Deferred(
                "identity-provider-unavailable", "the member token cannot be used"
            ) from None
        except SlurmUnreachable:
            raise Deferred("slurm-unavailable", "slurmrestd refused the connection") from None
        except SlurmUncertain:
            raise Deferred(
                "slurm-observation-unavailable", "Slurm could not be asked now"
            ) from None
        except SlurmRefused:
            att = self._attempt(att.attempt_id)
            return await self._finish(command, att)

    async def _advance(
        self, command: SiteCommand, att: AttemptRow, credential: MemberCredential
    ) -> CommandResult:
        user = att.record["binding"]["user"]
        stages = self.journal.stages(att.attempt_id)
        if stages["stage-in"].state in ("prepared", "refused"):
            if att.cancel_state is not None or stages["stage-in"].state == "refused":
                return await self._finish(command, att)
            # Not started yet (or its start was deferred): nothing native exists.
            return CommandResult(
                command.command_id, "succeeded", observation=self._observation(att, "prepared")
            )
        for stage in STAGES:
            row = stages[stage]
            if row.state in ("submitting", "held") and att.cancel_state is None:
                await self._ensure_submitted(
                    att, stage, self._predecessor_id(stages, stage), credential
                )
        stages = self.journal.stages(att.attempt_id)
        jobs = await self.rest.list_jobs(credential=credential, user=user)
        await self._sweep_duplicates(att, stages, jobs, credential)
        by_id = {j.job_id: j for j in jobs}
        for row in (stages[s] for s in STAGES):
            if row.job_id is None or (row.native or {}).get("terminal"):
                continue
            job = by_id.get(row.job_id)
            if job is None:
                job = await self.rest.accounting_job(row.job_id, credential=credential, user=user)
            if job is None:
                continue  # accounting lag: keep the last known state
            if not self._identity(att, row.stage).matches(job):
                log.error(
                    "attempt %s %s: job %s does not carry the saved identity",
                    att.attempt_id,
                    row.stage,
                    row.job_id,
                )
                raise Deferred(
                    "slurm-observation-unavailable", "a saved job id shows another identity"
                )
            self.journal.update_stage(att.attempt_id, row.stage, native=_facts(job))
        att = self._attempt(att.attempt_id)
        stages = self.journal.stages(att.attempt_id)
        for stage in ("stage-in", "stage-out"):
            # A staging job's grant is revoked once the job has ended (seed 000).
            if (stages[stage].native or {}).get("terminal") and stages[
                stage
            ].grant_state == "issued":
                await self._release_grant(att.attempt_id, stage)
        decided = self._decide(att, stages)
        if decided is not None:
            return await self._finish(command, att)
        if att.cancel_state is None:
            for prev, nxt in (("stage-in", "compute"), ("compute", "stage-out")):
                p, n = stages[prev], stages[nxt]
                if (p.native or {}).get("state") == "COMPLETED" and n.state == "prepared":
                    deadline = att.record.get("deadline_epoch")
                    if nxt == "compute" and deadline is not None and self.clock() >= deadline:
                        self.journal.update_attempt(
                            att.attempt_id,
                            outcome=self._terminal(
                                att,
                                stages,
                                "failed",
                                failure=_failure(
                                    "compute", None, None, None, None, "attempt-deadline-passed"
                                ),
                            ),
                            cleanup_state="pending",
                        )
                        return await self._finish(command, self._attempt(att.attempt_id))
                    try:
                        await self._ensure_submitted(att, nxt, p.job_id, credential)
                    except _DeadlinePassed:
                        self.journal.update_attempt(
                            att.attempt_id,
                            outcome=self._terminal(
                                att,
                                stages,
                                "failed",
                                failure=_failure(
                                    "compute", None, None, None, None, "attempt-deadline-passed"
                                ),
                            ),
                            cleanup_state="pending",
                        )
                        return await self._finish(command, self._attempt(att.attempt_id))
                    except SlurmRefused:
                        return await self._finish(command, self._attempt(att.attempt_id))
                    stages = self.journal.stages(att.attempt_id)
        att = self._attempt(att.attempt_id)
        stages = self.journal.stages(att.attempt_id)
        running = (
            att.reported_running
            or _started(stages["compute"])
            or stages["stage-out"].job_id is not None
        )
        if running and not att.reported_running:
            # The first running observation is saved before it is returned (seed 000).
            self.journal.update_attempt(att.attempt_id, reported_running=1)
            att = self._attempt(att.attempt_id)
        phase = "running" if running else "queued"
        return CommandResult(
            command.command_id,
            "succeeded",
            native_jobs=self._native_jobs(att.attempt_id),
            observation=self._observation(
                att, phase, native_state=self._native_state(att.attempt_id)
            ),
        )

    async def _sweep_duplicates(
        self,
        att: AttemptRow,
        stages: dict[str, StageRow],
        jobs: list[NativeJob],
        credential: MemberCredential,
    ) -> None:
        """Cancel held jobs that carry a stage's identity but are not its saved job."""
        user = att.record["binding"]["user"]
        for row in stages.values():
            if row.state not in ("held", "submitted"):
                continue
            identity = self._identity(att, row.stage)
            for job in jobs:
                if (
                    identity.matches(job)
                    and job.job_id != row.job_id
                    and job.state == "PENDING"
                    and job.reason == "JobHeldUser"
                ):
                    log.warning(
                        "attempt %s %s: cancelling held duplicate job %s",
                        att.attempt_id,
                        row.stage,
                        job.job_id,
                    )
                    await self.rest.cancel(job.job_id, credential=credential, user=user)

    def _predecessor_id(self, stages: dict[str, StageRow], stage: str) -> str | None:
        index = STAGES.index(stage)
        return stages[STAGES[index - 1]].job_id if index > 0 else None

    def _decide(self, att: AttemptRow, stages: dict[str, StageRow]) -> dict[str, Any] | None:
        """Save and return the terminal observation when the chain has ended, else None."""
        if att.outcome is not None:
            return att.outcome
        outcome = None
        for stage in STAGES:
            row = stages[stage]
            facts = row.native or {}
            if row.state == "refused":
                code = (row.refusal or {}).get("code")
                outcome = self._terminal(
                    att, stages, "failed", failure=_failure(stage, None, None, None, None, code)
                )
                break
            if facts.get("terminal") and facts.get("state") != "COMPLETED":
                if facts.get("state") == "CANCELLED":
                    outcome = self._terminal(att, stages, "cancelled", native_state="CANCELLED")
                else:
                    code = EXIT_CODES.get(
                        (stage, facts.get("exit_code"))
                    ) or SCHEDULER_FAILURE_CODES.get(facts.get("state"), "stage-failed")
                    outcome = self._terminal(
                        att,
                        stages,
                        "failed",
                        native_state=facts.get("state"),
                        failure=_failure(
                            stage,
                            facts.get("state"),
                            row.job_id,
                            facts.get("exit_code"),
                            facts.get("signal"),
                            code,
                        ),
                    )
                break
        if outcome is None:
            out = stages["stage-out"].native or {}
            if out.get("terminal") and out.get("state") == "COMPLETED":
                outcome = self._terminal(
                    att,
                    stages,
                    "succeeded",
                    native_state="COMPLETED",
                    output_commit=self._output_commit(att.attempt_id),
                )
            elif (
                att.cancel_state is not None
                and not any(
                    r.job_id and not (r.native or {}).get("terminal") for r in stages.values()
                )
                and not any(r.state == "submitting" for r in stages.values())
            ):
                outcome = self._terminal(att, stages, "cancelled", native_state="CANCELLED")
        if outcome is None:
            return None
        self.journal.update_attempt(att.attempt_id, outcome=outcome, cleanup_state="pending")
        return outcome

    def _terminal(
        self,
        att: AttemptRow,
        stages: dict[str, StageRow],
        phase: str,
        *,
        native_state: str | None = None,
        failure: dict[str, Any] | None = None,
        output_commit: str | None = None,
    ) -> dict[str, Any]:
        compute = stages["compute"].native or {}
        return {
            "phase": phase,
            "native_state": native_state,
            "exit_code": compute.get("exit_code")
            if phase == "succeeded"
            else (failure or {}).get("exit_code"),
            "signal": (failure or {}).get("signal"),
            "failure": failure,
            "output_commit": output_commit,
            "endpoint": None,
            "observed_at": _now_iso(self.clock()),
        }

    async def _finish(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        stages = self.journal.stages(att.attempt_id)
        outcome = self._decide(att, stages)
        att = self._attempt(att.attempt_id)
        if outcome is None:
            raise Deferred("slurm-observation-unavailable", "the chain has not ended yet")
        await self._cleanup(att)
        return CommandResult(
            command.command_id,
            "succeeded",
            native_jobs=self._native_jobs(att.attempt_id),
            observation=outcome,
        )

    async def _cleanup(self, att: AttemptRow) -> None:
        """Release grants and remove the workspace; durable and retried (seed 000)."""
        for stage in ("stage-in", "stage-out"):
            await self._release_grant(att.attempt_id, stage)
        pending = [
            s for s in self.journal.stages(att.attempt_id).values() if s.grant_state == "issued"
        ]
        ws = Path(self._workspace(att))
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
        if pending:
            raise Deferred("repository-unavailable", "a repository grant is not released yet")
        self.journal.update_attempt(att.attempt_id, cleanup_state="done")

    def _output_commit(self, attempt_id: str) -> str | None:
        try:
            with open(self._log_path(attempt_id, "stage-out"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 65536))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        found = None
        for line in text.splitlines():
            if line.startswith(OUTPUT_COMMIT_MARK):
                value = line[len(OUTPUT_COMMIT_MARK) :].strip()
                if _COMMIT.match(value):
                    found = value
        return found

    # ================================================================== cancellation
    async def _cancel_chain(self, att: AttemptRow) -> str:
        user = att.record["binding"]["user"]
        try:
            credential = await self._credential(att)
            stages = self.journal.stages(att.attempt_id)
            for row in stages.values():
                if row.state == "submitting":
                    await self._settle_uncertain(att, row, credential)
            stages = self.journal.stages(att.attempt_id)
            answers = []
            for stage in reversed(STAGES):
                row = stages[stage]
                if row.job_id is None:
                    continue
                if (row.native or {}).get("terminal"):
                    answers.append("already-terminal")
                    continue
                answer = await self.rest.cancel(row.job_id, credential=credential, user=user)
                self.fault(f"cancelled:{stage}")
                if answer == "already-terminal":
                    # Cancelled by an earlier, interrupted run of this same cancellation?
                    live = {
                        j.job_id: j
                        for j in await self.rest.list_jobs(credential=credential, user=user)
                    }
                    job = live.get(row.job_id) or await self.rest.accounting_job(
                        row.job_id, credential=credential, user=user
                    )
                    if job is not None and job.state == "CANCELLED":
                        answer = "accepted"
                if answer == "not-found":
                    job = await self.rest.accounting_job(
                        row.job_id, credential=credential, user=user
                    )
                    if job is None:
                        # 404 plus an empty accounting page is not proof of absence.
                        raise Deferred(
                            "slurm-observation-unavailable", "the job is not visible yet"
                        )
                    self.journal.update_stage(att.attempt_id, stage, native=_facts(job))
                    answer = "already-terminal" if job.terminal else "accepted"
                answers.append(answer)
        except (MemberTokenRejected, JwksUnavailable):
            raise Deferred(
                "identity-provider-unavailable", "the member token cannot be used"
            ) from None
        except SlurmUnreachable:
            raise Deferred("slurm-unavailable", "slurmrestd refused the connection") from None
        except SlurmUncertain:
            raise Deferred(
                "slurm-observation-unavailable", "Slurm could not be asked now"
            ) from None
        if "accepted" in answers:
            return "accepted"
        if answers:
            return "already-terminal"
        return "not-found"

    def _cancel_result(self, command: SiteCommand, att: AttemptRow) -> CommandResult:
        phase = (att.outcome or {}).get("phase") or "cancelled"
        observation = att.outcome or self._observation(att, phase, native_state="CANCELLED")
        return CommandResult(
            command.command_id,
            "succeeded",
            message=att.cancel_result,
            native_jobs=self._native_jobs(att.attempt_id),
            observation=observation,
        )

    # ================================================================== helpers
    def _attempt(self, attempt_id: str) -> AttemptRow:
        att = self.journal.attempt(attempt_id)
        assert att is not None
        return att

    def _save(self, command: SiteCommand, result: CommandResult) -> CommandResult:
        self.journal.save_result(
            command.command_id, command.attempt_id, command.kind, result.to_json()
        )
        return result

    def _native_jobs(self, attempt_id: str) -> list[dict[str, Any]]:
        stages = self.journal.stages(attempt_id)
        return [{"stage": s, "job_id": stages[s].job_id} for s in STAGES if stages[s].job_id]

    def _native_state(self, attempt_id: str) -> str | None:
        stages = self.journal.stages(attempt_id)
        for stage in reversed(STAGES):
            facts = stages[stage].native
            if facts:
                return facts.get("state")
            if stages[stage].job_id:
                return "PENDING"
        return None

    def _observation(
        self, att: AttemptRow, phase: str, *, native_state: str | None = None
    ) -> dict[str, Any]:
        return {
            "phase": phase,
            "native_state": native_state,
            "exit_code": None,
            "signal": None,
            "failure": None,
            "output_commit": None,
            "endpoint": None,
            "observed_at": _now_iso(self.clock()),
        }


class _DeadlinePassed(Exception):
    """The accepted-work deadline passed just before a fresh submission."""


def _read_tail(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """The last ``max_bytes`` of a file and its size; an absent file is empty."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes), size
    except FileNotFoundError:
        return b"", 0


def _facts(job: NativeJob) -> dict[str, Any]:
    return {
        "state": job.state,
        "terminal": job.terminal,
        "exit_code": job.exit_code,
        "signal": job.signal,
        "reason": job.reason,
        "source": job.source,
    }


def _started(row: StageRow) -> bool:
    facts = row.native or {}
    return facts.get("state") in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED") or bool(
        facts.get("terminal")
    )


def _failure(
    stage: str,
    state: str | None,
    job_id: str | None,
    exit_code: int | None,
    signal: int | None,
    code: str | None,
) -> dict[str, Any]:
    """A bounded failure record: no scheduler text, no secrets (seed 001)."""
    return {
        "stage": stage,
        "scheduler_state": state,
        "job_id": job_id,
        "exit_code": exit_code,
        "signal": signal,
        "code": code,
    }
