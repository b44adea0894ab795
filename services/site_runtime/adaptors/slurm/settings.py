"""Settings of the slurm executor, read once at startup (docs/slurm-lab.md, Settings).

A malformed value stops the Runtime before it opens a journal (:class:`SettingsError`).

| variable | meaning | default |
| --- | --- | --- |
| ``SLURM_REST_URL`` | slurmrestd base URL | ``http://127.0.0.1:6820`` |
| ``SLURM_REST_ALLOW_INSECURE_LOOPBACK`` | allow plain http to a loopback slurmrestd | ``false`` |
| ``SLURM_CA_FILE`` | CA bundle for an https slurmrestd | system |
| ``SLURM_PARTITION`` | compute partition | ``compute`` |
| ``SLURM_STAGING_PARTITION`` | partition of both staging jobs | ``staging`` |
| ``SLURM_STAGING_CPUS`` | CPUs of a staging job (1..2147483647) | ``1`` |
| ``SLURM_STAGING_MEMORY_MIB`` | memory of a staging job, MiB | ``512`` |
| ``SLURM_STAGING_TIME_MINUTES`` | time limit of a staging job, minutes | ``10`` |
| ``SLURM_GPU_GRES`` | ``CLASS=GRES`` pairs, comma separated | none (no GPUs) |
| ``SLURM_MAX_WALL_SECONDS`` | longest compute wall time, seconds | none (no limit) |
| ``SLURM_JWT_ISSUER`` | exact ``iss`` of member tokens | required |
| ``SLURM_JWT_AUTHORIZED_PARTY`` | exact ``azp`` of member tokens | required |
| ``SLURM_JWKS_URL`` | issuer JWKS (https, loopback http, or ``file:`` path) | required |
| ``SLURM_LOST_DEADLINE_SECONDS`` | how long a job may be absent from slurmctld and accounting before its stage is ``lost`` | ``600`` |
| ``SLURM_REQUEUE_DEADLINE_SECONDS`` | how long a job preempted in accounting may stay out of the queue before it is ``preempted`` | ``300`` |
| ``SLURM_COMPUTE_REQUEUES`` | how many times Slurm may requeue a compute job before the Attempt fails ``slurm-job-requeued`` (staging jobs: never) | ``0`` |
| ``SLURM_ATTEMPT_PENDING_SECONDS`` | how long a condition of one Attempt may keep its ``observe`` pending before it answers with what is known | ``60`` |
| ``SLURM_ARRAY_GRANT_RENEW_SECONDS`` | renew a not-yet-started array task's repository grant when less than this (or half its lifetime, if less) remains | ``1800`` |
| ``SLURM_NATIVE_NAME_PREFIX`` | prefix of native job names and comments | ``metallo`` |
| ``SLURM_WORKSPACE_ROOT`` | where member jobs create Attempt workspaces and logs | ``/var/lib/metallo-slurm-lab/workspaces`` |
| ``REPOSITORY_CA_FILE`` | CA of the repository server, given to staging jobs | none |
| ``RUNTIME_STATE_DIRECTORY`` | directory of ``jobs.sqlite`` | required |
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from site_runtime.domain.grant_renewal import DEFAULT_RENEW_SECONDS
from site_runtime.domain.slurm_jobs import StagingSettings, check_prefix
from site_runtime.domain.slurm_reconcile import Deadlines

MAX_INT = 2_147_483_647
_CLASS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_GRES = re.compile(r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*$")
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class SettingsError(ValueError):
    """A setting is malformed; the message names the variable, never a secret."""


def parse_positive(name: str, raw: str | None, default: int) -> int:
    """An integer from 1 to 2147483647 (``default`` when absent or empty)."""
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if not text.isdigit():
        raise SettingsError(f"{name} must be an integer from 1 to {MAX_INT}")
    value = int(text)
    if not 1 <= value <= MAX_INT:
        raise SettingsError(f"{name} must be an integer from 1 to {MAX_INT}")
    return value


def parse_count(name: str, raw: str | None, default: int) -> int:
    """An integer from 0 to 100 (``default`` when absent or empty)."""
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if not text.isdigit() or int(text) > 100:
        raise SettingsError(f"{name} must be an integer from 0 to 100")
    return int(text)


def parse_gpu_gres(raw: str | None) -> dict[str, str]:
    """``SLURM_GPU_GRES``: ``gh200=gpu:nvidia_gh200_144g_hbm3e,a100=gpu:a100`` → mapping."""
    if raw is None or raw.strip() == "":
        return {}
    mapping: dict[str, str] = {}
    for pair in raw.split(","):
        cls, sep, gres = pair.strip().partition("=")
        cls, gres = cls.strip(), gres.strip()
        if not sep or not _CLASS.match(cls) or not _GRES.match(gres) or cls in mapping:
            raise SettingsError("SLURM_GPU_GRES must be CLASS=GRES pairs separated by commas")
        mapping[cls] = gres
    return mapping


def parse_max_wall(raw: str | None) -> int | None:
    """``SLURM_MAX_WALL_SECONDS``: None (no limit) or an integer number of seconds."""
    if raw is None or raw.strip() == "":
        return None
    return parse_positive("SLURM_MAX_WALL_SECONDS", raw, 0)


def _partition(name: str, raw: str | None, default: str) -> str:
    value = (raw or "").strip() or default
    if not _PARTITION.match(value):
        raise SettingsError(f"{name} is not a partition name")
    return value


def _flag(raw: str | None) -> bool:
    return (raw or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class SlurmSettings:
    """Validated executor settings (see the module table)."""

    rest_url: str = "http://127.0.0.1:6820"
    allow_insecure_loopback: bool = False
    ca_file: str | None = None
    compute_partition: str = "compute"
    staging: StagingSettings = field(default_factory=StagingSettings)
    gpu_gres: Mapping[str, str] = field(default_factory=dict)
    max_wall_seconds: int | None = None
    reconciliation: Deadlines = field(default_factory=Deadlines)
    attempt_pending_seconds: int = 60
    array_grant_renew_seconds: int = DEFAULT_RENEW_SECONDS
    jwt_issuer: str = ""
    jwt_authorized_party: str = ""
    jwks_url: str = ""
    name_prefix: str = "metallo"
    workspace_root: Path = Path("/var/lib/metallo-slurm-lab/workspaces")
    repository_ca_file: str | None = None
    state_directory: Path = Path("/var/lib/metallo/runtime")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SlurmSettings:
        """Read and validate the settings; raise :class:`SettingsError`."""
        env = os.environ if env is None else env
        staging = StagingSettings(
            cpus=parse_positive("SLURM_STAGING_CPUS", env.get("SLURM_STAGING_CPUS"), 1),
            memory_mib=parse_positive(
                "SLURM_STAGING_MEMORY_MIB", env.get("SLURM_STAGING_MEMORY_MIB"), 512
            ),
            time_minutes=parse_positive(
                "SLURM_STAGING_TIME_MINUTES", env.get("SLURM_STAGING_TIME_MINUTES"), 10
            ),
            partition=_partition(
                "SLURM_STAGING_PARTITION", env.get("SLURM_STAGING_PARTITION"), "staging"
            ),
        )
        for required in (
            "SLURM_JWT_ISSUER",
            "SLURM_JWT_AUTHORIZED_PARTY",
            "SLURM_JWKS_URL",
            "RUNTIME_STATE_DIRECTORY",
        ):
            if not (env.get(required) or "").strip():
                raise SettingsError(f"{required} is required")
        try:
            prefix = check_prefix((env.get("SLURM_NATIVE_NAME_PREFIX") or "metallo").strip())
        except ValueError as error:
            raise SettingsError(f"SLURM_NATIVE_NAME_PREFIX: {error}") from None
        root = Path(
            (env.get("SLURM_WORKSPACE_ROOT") or "/var/lib/metallo-slurm-lab/workspaces").strip()
        )
        if not root.is_absolute():
            raise SettingsError("SLURM_WORKSPACE_ROOT must be an absolute path")
        return cls(
            rest_url=(env.get("SLURM_REST_URL") or "http://127.0.0.1:6820").strip(),
            allow_insecure_loopback=_flag(env.get("SLURM_REST_ALLOW_INSECURE_LOOPBACK")),
            ca_file=(env.get("SLURM_CA_FILE") or "").strip() or None,
            compute_partition=_partition("SLURM_PARTITION", env.get("SLURM_PARTITION"), "compute"),
            staging=staging,
            gpu_gres=parse_gpu_gres(env.get("SLURM_GPU_GRES")),
            max_wall_seconds=parse_max_wall(env.get("SLURM_MAX_WALL_SECONDS")),
            attempt_pending_seconds=parse_positive(
                "SLURM_ATTEMPT_PENDING_SECONDS", env.get("SLURM_ATTEMPT_PENDING_SECONDS"), 60
            ),
            array_grant_renew_seconds=parse_positive(
                "SLURM_ARRAY_GRANT_RENEW_SECONDS",
                env.get("SLURM_ARRAY_GRANT_RENEW_SECONDS"),
                DEFAULT_RENEW_SECONDS,
            ),
            reconciliation=Deadlines(
                lost_seconds=parse_positive(
                    "SLURM_LOST_DEADLINE_SECONDS", env.get("SLURM_LOST_DEADLINE_SECONDS"), 600
                ),
                requeue_seconds=parse_positive(
                    "SLURM_REQUEUE_DEADLINE_SECONDS", env.get("SLURM_REQUEUE_DEADLINE_SECONDS"), 300
                ),
                compute_requeues=parse_count(
                    "SLURM_COMPUTE_REQUEUES", env.get("SLURM_COMPUTE_REQUEUES"), 0
                ),
            ),
            jwt_issuer=env["SLURM_JWT_ISSUER"].strip(),
            jwt_authorized_party=env["SLURM_JWT_AUTHORIZED_PARTY"].strip(),
            jwks_url=env["SLURM_JWKS_URL"].strip(),
            name_prefix=prefix,
            workspace_root=root,
            repository_ca_file=(env.get("REPOSITORY_CA_FILE") or "").strip() or None,
            state_directory=Path(env["RUNTIME_STATE_DIRECTORY"].strip()),
        )
