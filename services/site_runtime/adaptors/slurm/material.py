"""A ``prepare`` command's material checked into the saved Attempt record (docs/slurm-lab.md).

Everything that cannot run at this Site is refused here, before any workspace or
native effect: ``unsupported-slurm-accelerator-class`` (no GRES for the GPU
class), ``slurm-wall-time-above-limit``, ``unsupported-slurm-inputs`` and
``invalid-material`` (identifiers, binding, commands, environment, working
directory, repository URL, commit and branches).  The record holds no credential.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from site_runtime.adaptors.slurm.scripts import SCRIPT_VERSION
from site_runtime.adaptors.slurm.settings import SlurmSettings
from site_runtime.application.ports import SiteCommand
from site_runtime.domain.parameters import parameter_environment
from site_runtime.domain.slurm_jobs import check_identifier

COMMIT = re.compile(r"^[0-9a-f]{40}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}(?<![./])$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_RESERVED_ENV = ("METALLO_", "SLURM_", "GIT_")
MAX_COMMAND_BYTES = 1024 * 1024


class Refusal(Exception):
    """A definite refusal of a command (``code``), made before any native effect."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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


def prepared_record(
    command: SiteCommand, settings: SlurmSettings, clock: Callable[[], float]
) -> dict[str, Any]:
    """The Attempt record ``prepare`` saves, or a :class:`Refusal` of the material."""
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
        if not isinstance(gpu_class, str) or gpu_class not in settings.gpu_gres:
            raise Refusal(
                "unsupported-slurm-accelerator-class",
                "the Site offers no GRES for this GPU class",
            )
        gres = settings.gpu_gres[gpu_class]
        if not gres.startswith("gres:"):
            gres = f"gres:{gres}"
        gres = f"{gres}:{gpus}"
    wall = int(resources.get("wallTimeSeconds") or 3600)
    if settings.max_wall_seconds is not None and wall > settings.max_wall_seconds:
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
    env = {**env, **parameter_environment(spec, Refusal)}
    workdir = runtime.get("workingDirectory", ".") or "."
    if workdir.startswith("/") or ".." in Path(workdir).parts:
        raise Refusal("invalid-material", "the working directory leaves the checkout")
    url, commit = repository.get("url"), repository.get("commit")
    branch = repository.get("branch") or "main"
    output_branch = repository.get("output_branch") or branch
    if not isinstance(url, str) or not url or url.startswith("-") or len(url) > 2048:
        raise Refusal("invalid-material", "the repository URL is not usable")
    if not isinstance(commit, str) or not COMMIT.match(commit):
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
            "partition": settings.compute_partition,
            "cpus": int(resources.get("cpus") or 1),
            "memory_mib": int(resources.get("memoryMiB") or 1024),
            "nodes": int(resources.get("nodes") or 1),
            "time_minutes": max(1, math.ceil(wall / 60)),
            "tres_per_node": gres,
        },
        "staging": settings.staging.to_json(),
        "prefix": settings.name_prefix,
        "workspace_root": str(settings.workspace_root),
        "repository_ca": settings.repository_ca_file,
        "deadline": p.get("deadline"),
        "deadline_epoch": _deadline(p.get("deadline")),
        "script_version": SCRIPT_VERSION,
        "prepared_at": clock(),
    }
