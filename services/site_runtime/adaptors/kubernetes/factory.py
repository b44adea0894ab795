"""Wiring of the kubernetes executor; ``__main__`` calls :func:`build_executor` for
``--executor kubernetes``.

Settings come from ``KUBERNETES_*`` (:mod:`.settings`); the Site edge (the Runtime's
``psb_`` grant) is the execution authority, the repository-grant source, the read
permits and the native-end notice, as for the local executor.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from site_runtime.adaptors.edge.client import EdgeClient
from site_runtime.adaptors.kubernetes import pod_stage
from site_runtime.adaptors.kubernetes.api import KubeApi
from site_runtime.adaptors.kubernetes.executor import KubernetesExecutor
from site_runtime.adaptors.kubernetes.journal import KubernetesJournal
from site_runtime.adaptors.kubernetes.settings import SettingsError, settings_from_env
from site_runtime.adaptors.local import stage_runner

__all__ = ["SettingsError", "build_executor", "local_helper_argv"]


def local_helper_argv() -> tuple[str, ...]:
    """The helper command for a lab whose kubelet runs Pods on this host: this
    checkout's helper and stage runner under the system Python (readable by members)."""
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    return (
        python,
        "-I",
        "-S",
        str(Path(pod_stage.__file__).resolve()),
        "--runner",
        str(Path(stage_runner.__file__).resolve()),
    )


def build_executor(
    *,
    env: Mapping[str, str],
    edge: EdgeClient,
    state_directory: Path,
    kubeconfig: str | None = None,
) -> KubernetesExecutor:
    """The executor over ``env``'s settings; raises SettingsError before opening anything."""
    settings_env = dict(env)
    if kubeconfig:
        settings_env["KUBERNETES_KUBECONFIG"] = kubeconfig
    settings = settings_from_env(settings_env, state_directory, helper_argv=local_helper_argv())
    in_cluster = str(settings.kubeconfig) == "in-cluster"  # the Pod's ServiceAccount
    if not in_cluster and not settings.kubeconfig.is_file():
        raise SettingsError(f"KUBERNETES_KUBECONFIG: no file {settings.kubeconfig}")
    api = KubeApi(None if in_cluster else settings.kubeconfig, context=settings.context)
    return KubernetesExecutor(
        settings,
        KubernetesJournal(state_directory / "jobs.sqlite"),
        api,
        authority=edge,
        grants=edge,
        on_native_end=edge.notice_native_end,
    )
