"""Settings of the kubernetes executor from the environment (docs/site-runtime.md, Kubernetes).

| variable | meaning | default |
| --- | --- | --- |
| ``KUBERNETES_KUBECONFIG`` | kubeconfig of the Runtime's own identity, or ``in-cluster`` (its ServiceAccount; required) | — |
| ``KUBERNETES_CONTEXT`` | context in it | current context |
| ``KUBERNETES_SITE_ID`` | the Site this Runtime serves (labels, list selector; required) | — |
| ``KUBERNETES_JOB_IMAGE`` | fixed platform image of every Job | ``metallo/job:1`` |
| ``KUBERNETES_HELPER_IMAGE`` | fixed platform image of the stage helper Pods | ``metallo/helper:1`` |
| ``KUBERNETES_HELPER_COMMAND`` | JSON argv of the helper in its image (stage appended) | the image's ``/opt/metallo`` |
| ``KUBERNETES_NAMESPACE_TEMPLATE`` | Project namespace (``{project}``, ``{account}``) | ``metallo-{project}`` |
| ``KUBERNETES_MEMBER_GROUPS`` | comma-separated groups sent when impersonating | ``metallo:members`` |
| ``KUBERNETES_RUN_AS`` | JSON ``{"user": [uid, gid]}``, or ``passwd`` (this host's users; labs) | — |
| ``KUBERNETES_GPU_CLASSES`` | JSON ``{"a100": {"resource": "nvidia.com/gpu", "nodeSelector": {…}}}`` | ``{}`` |
| ``KUBERNETES_MAX_WALL_SECONDS`` | the Site's wall-time limit | none |
| ``KUBERNETES_STAGING_SECONDS`` | limit of each helper Pod | 600 |
| ``KUBERNETES_WORKSPACE_MIB`` / ``KUBERNETES_STORAGE_CLASS`` | workspace PVC size / class | 1024 / default |
| ``KUBERNETES_RETENTION_SECONDS`` | how long an ended Attempt's PVC and Job are kept | 86400 |
| ``KUBERNETES_POLL_SECONDS`` | supervision pass interval | 2 |

A malformed value raises :class:`SettingsError` before anything is opened.
"""

from __future__ import annotations

import json
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from site_runtime.adaptors.env_settings import SettingsError, env_int
from site_runtime.domain.kubernetes_batch import GpuClass, KubernetesSite

DEFAULT_HELPER = (
    "python3",
    "-I",
    "-S",
    "/opt/metallo/pod_stage.py",
    "--runner",
    "/opt/metallo/stage_runner.py",
)


@dataclass(frozen=True)
class KubernetesSettings:
    """Everything the executor reads from the environment."""

    kubeconfig: Path
    context: str | None
    site: KubernetesSite
    retention_seconds: int
    poll_seconds: float
    state_directory: Path


def _json(env: Mapping[str, str], name: str, default: object) -> object:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        return json.loads(raw)
    except ValueError:
        raise SettingsError(f"{name} must be JSON") from None


def run_as_map(raw: str) -> dict[str, tuple[int, int]]:
    """``KUBERNETES_RUN_AS``: a JSON map, or ``passwd`` for every non-system user of this
    host (uid ≥ 1000; what a lab whose kubelet runs Pods as host users needs)."""
    if raw.strip() == "passwd":
        return {u.pw_name: (u.pw_uid, u.pw_gid) for u in pwd.getpwall() if 1000 <= u.pw_uid < 60000}
    try:
        loaded = json.loads(raw) if raw.strip() else {}
        return {str(k): (int(v[0]), int(v[1])) for k, v in loaded.items()}
    except (ValueError, TypeError, IndexError, AttributeError):
        raise SettingsError('KUBERNETES_RUN_AS must be {"user": [uid, gid]} or passwd') from None


def settings_from_env(
    env: Mapping[str, str], state_directory: Path, helper_argv: tuple[str, ...] | None = None
) -> KubernetesSettings:
    """The executor's settings; ``helper_argv`` is the default helper command."""
    kubeconfig = (env.get("KUBERNETES_KUBECONFIG") or "").strip()
    site_id = (env.get("KUBERNETES_SITE_ID") or "").strip()
    if not kubeconfig or not site_id:
        raise SettingsError("KUBERNETES_KUBECONFIG and KUBERNETES_SITE_ID are required")
    helper = _json(env, "KUBERNETES_HELPER_COMMAND", list(helper_argv or DEFAULT_HELPER))
    if not isinstance(helper, list) or not helper or not all(isinstance(a, str) for a in helper):
        raise SettingsError("KUBERNETES_HELPER_COMMAND must be a JSON list of strings")
    classes = _json(env, "KUBERNETES_GPU_CLASSES", {})
    try:
        gpu_classes = {
            str(name): GpuClass(
                str(spec["resource"]),
                {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
            )
            for name, spec in dict(classes).items()  # type: ignore[arg-type]
        }
    except (TypeError, KeyError, ValueError, AttributeError):
        raise SettingsError('KUBERNETES_GPU_CLASSES must be {"class": {"resource": …}}') from None
    groups = tuple(
        g.strip()
        for g in env.get("KUBERNETES_MEMBER_GROUPS", "metallo:members").split(",")
        if g.strip()
    )
    site = KubernetesSite(
        site_id=site_id,
        job_image=env.get("KUBERNETES_JOB_IMAGE", "metallo/job:1"),
        helper_image=env.get("KUBERNETES_HELPER_IMAGE", "metallo/helper:1"),
        helper_argv=tuple(helper),
        run_as=run_as_map(env.get("KUBERNETES_RUN_AS", "")),
        mount_path=env.get("KUBERNETES_MOUNT_PATH", "/workspace"),
        namespace_template=env.get("KUBERNETES_NAMESPACE_TEMPLATE", "metallo-{project}"),
        member_groups=groups,
        gpu_classes=gpu_classes,
        max_wall_seconds=env_int(env, "KUBERNETES_MAX_WALL_SECONDS", None, 1),
        staging_seconds=env_int(env, "KUBERNETES_STAGING_SECONDS", 600, 1) or 600,
        workspace_mib=env_int(env, "KUBERNETES_WORKSPACE_MIB", 1024, 1) or 1024,
        storage_class=(env.get("KUBERNETES_STORAGE_CLASS") or "").strip() or None,
        repository_ca_file=(env.get("REPOSITORY_CA_FILE") or "").strip() or None,
    )
    return KubernetesSettings(
        kubeconfig=Path(kubeconfig),
        context=(env.get("KUBERNETES_CONTEXT") or "").strip() or None,
        site=site,
        retention_seconds=env_int(env, "KUBERNETES_RETENTION_SECONDS", 86400, 0) or 0,
        poll_seconds=float(env_int(env, "KUBERNETES_POLL_SECONDS", 2, 1) or 2),
        state_directory=state_directory,
    )
