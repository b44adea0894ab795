"""Wiring of the local executor; ``__main__`` calls :func:`build_executor` for
``--executor local`` (docs/site-runtime.md, Local executor: ``RUNTIME_LOCAL_*``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from site_runtime.adaptors.edge.client import EdgeClient
from site_runtime.adaptors.env_settings import SettingsError, env_int
from site_runtime.adaptors.local.executor import LocalExecutor, LocalSettings
from site_runtime.adaptors.local.jobs import LocalJobsJournal
from site_runtime.adaptors.local.settings import this_machine

__all__ = ["SettingsError", "build_executor", "local_settings"]


def local_settings(
    env: Mapping[str, str], *, workspace_root: Path, ca_file: Path | None
) -> LocalSettings:
    """The local executor's settings from ``env``; raises :class:`SettingsError`.

    ``REPOSITORY_CA_FILE`` defaults to the edge's CA (``ca_file``).
    """
    return LocalSettings(
        workspace_root=workspace_root,
        max_wall_seconds=env_int(env, "RUNTIME_LOCAL_MAX_WALL_SECONDS", None, 1),
        machine=this_machine(),
        grace_seconds=float(env_int(env, "RUNTIME_LOCAL_GRACE_SECONDS", 10, 0) or 0),
        staging_seconds=env_int(env, "RUNTIME_LOCAL_STAGING_SECONDS", 600, 1) or 600,
        max_active=env_int(env, "RUNTIME_LOCAL_MAX_ACTIVE", 4, 1) or 4,  # 0 would start nothing
        release_delay_seconds=float(env_int(env, "RUNTIME_LOCAL_RELEASE_SECONDS", 1, 0) or 0),
        repository_ca_file=Path(env["REPOSITORY_CA_FILE"])
        if env.get("REPOSITORY_CA_FILE")
        else ca_file,
    )


def build_executor(
    *,
    env: Mapping[str, str],
    edge: EdgeClient,
    ca_file: Path | None,
    state_directory: Path,
    workspace_root: Path | None = None,
) -> LocalExecutor:
    """The embedded local executor with its ``jobs.sqlite`` in ``state_directory``
    and its workspaces under ``workspace_root`` (default ``STATE_DIR/workspaces``);
    the Site ``edge`` authorises, issues grants and hears of native ends at once
    (ADR 0016). Raises :class:`SettingsError`."""
    settings = local_settings(
        env, workspace_root=workspace_root or state_directory / "workspaces", ca_file=ca_file
    )
    return LocalExecutor(
        settings,
        LocalJobsJournal(state_directory / "jobs.sqlite"),
        authority=edge,
        grants=edge,
        on_native_end=edge.notice_native_end,
    )
