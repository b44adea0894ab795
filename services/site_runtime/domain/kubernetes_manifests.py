"""The Kubernetes objects of one ``k8s-job`` Attempt, rendered as plain JSON (seed 004 §5B,
§5C; docs/site-runtime.md, Kubernetes).

Per Attempt, in the member's Project namespace, all named by
:mod:`site_runtime.domain.kubernetes_names` and carrying its identity:

- a PersistentVolumeClaim, the private workspace (the Pods' ``fsGroup`` is the
  member's group, the checkout is created mode 0700 by the helper);
- a preparation helper Pod (``stage-in``) and a stage-out helper Pod, both the fixed
  platform helper image, each reading its repository grant from a short-lived Secret
  through ``secretKeyRef`` — never in the Pod spec's plain ``env``;
- the Job (``compute``): the fixed platform image, the action's exact argv (a shell
  only for a ``shell`` step), pre-commands as init containers in order,
  ``restartPolicy: Never``, ``backoffLimit: 0`` (retries belong to Execution Core),
  ``activeDeadlineSeconds`` from the wall time, requests = limits from the action.

Every Pod runs as the member's Unix identity (``runAsUser``/``runAsGroup``/
``fsGroup``, never root), with no service-account token. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from site_runtime.domain.kubernetes_batch import KubernetesJob, KubernetesSite
from site_runtime.domain.kubernetes_names import Identity, object_name

VOLUME = "workspace"
SECRET_USERNAME = "username"
SECRET_TOKEN = "token"
GRACE_SECONDS = 10


def literal(text: str) -> str:
    """``text`` escaped from Kubernetes' ``$(VAR)`` expansion of ``command``, ``args`` and
    ``env`` values (``$$`` becomes ``$``), so the container gets exactly ``text``."""
    return text.replace("$", "$$")


def _metadata(identity: Identity, namespace: str, role: str) -> dict[str, Any]:
    return {
        "name": object_name(identity.attempt_id, role),
        "namespace": namespace,
        "labels": identity.labels(role),
        "annotations": identity.annotations(),
    }


def repo_dir(site: KubernetesSite) -> str:
    """Path of the checkout inside every Pod (the PVC is mounted at ``mount_path``)."""
    return f"{site.mount_path.rstrip('/')}/repo"


def workspace_claim(site: KubernetesSite, identity: Identity, namespace: str) -> dict[str, Any]:
    """The Attempt's private workspace PVC (``ReadWriteOnce``, ``workspace_mib`` MiB)."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{site.workspace_mib}Mi"}},
    }
    if site.storage_class:
        spec["storageClassName"] = site.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(identity, namespace, "workspace"),
        "spec": spec,
    }


def grant_secret(
    identity: Identity, namespace: str, stage: str, username: str, token: str
) -> dict[str, Any]:
    """The short-lived, immutable Secret holding ``stage``'s repository grant. It exists
    only in memory until created; the executor deletes it once the helper Pod ends."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(identity, namespace, stage),
        "type": "Opaque",
        "immutable": True,
        "stringData": {SECRET_USERNAME: username, SECRET_TOKEN: token},
    }


def _security(job: KubernetesJob) -> dict[str, Any]:
    member = job.member
    return {
        "runAsUser": member.uid,
        "runAsGroup": member.gid,
        "fsGroup": member.gid,
        "runAsNonRoot": True,
    }


def _container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "privileged": False}


def _mounts(site: KubernetesSite) -> list[dict[str, Any]]:
    return [{"name": VOLUME, "mountPath": site.mount_path}]


def _volumes(identity: Identity) -> list[dict[str, Any]]:
    claim = object_name(identity.attempt_id, "workspace")
    return [{"name": VOLUME, "persistentVolumeClaim": {"claimName": claim}}]


def stage_spec(
    site: KubernetesSite, job: KubernetesJob, identity: Identity, stage: str
) -> dict[str, Any]:
    """What the helper does (the stage runner's spec; no secret in it): ``stage-in``
    checks out the pinned commit into the PVC, ``stage-out`` commits and pushes."""
    local = job.job
    return {
        "stage": stage,
        "repo_dir": repo_dir(site),
        "log_file": f"{site.mount_path.rstrip('/')}/.metallo/{stage}.log",
        "repository": {
            "url": local.repository_url,
            "commit": local.commit,
            "branch": local.branch,
        },
        "repository_ca_file": site.repository_ca_file,
        "grace_seconds": GRACE_SECONDS,
        "author": {"name": site.author_name, "email": site.author_email},
        "message": f"Metallo Run {identity.run_id} Attempt {identity.attempt_number} outputs",
        "wake_socket": None,
        "wall_time_seconds": site.staging_seconds,
        "working_directory": local.working_directory,
        "steps": [],
        "environment": {},
    }


def helper_pod(
    site: KubernetesSite,
    job: KubernetesJob,
    identity: Identity,
    stage: str,
    *,
    with_grant: bool,
) -> dict[str, Any]:
    """The ``stage`` (``stage-in`` | ``stage-out``) helper Pod. With ``with_grant`` its
    ``METALLO_GIT_USERNAME``/``METALLO_GIT_TOKEN`` come from the stage's Secret."""
    env: list[dict[str, Any]] = [
        {
            "name": "METALLO_STAGE_SPEC",
            "value": literal(json.dumps(stage_spec(site, job, identity, stage))),
        },
        {"name": "HOME", "value": site.mount_path},
        {"name": "LANG", "value": "C.UTF-8"},
    ]
    if with_grant:
        secret = object_name(identity.attempt_id, stage)
        for var, key in (
            ("METALLO_GIT_USERNAME", SECRET_USERNAME),
            ("METALLO_GIT_TOKEN", SECRET_TOKEN),
        ):
            env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    amount = {"cpu": f"{site.helper_cpu_millis}m", "memory": f"{site.helper_memory_mib}Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(identity, job.member.namespace, stage),
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": site.staging_seconds,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": _security(job),
            "containers": [
                {
                    "name": stage,
                    "image": site.helper_image,
                    "command": [literal(arg) for arg in (*site.helper_argv, stage)],
                    "env": env,
                    "workingDir": site.mount_path,
                    "volumeMounts": _mounts(site),
                    "resources": {"requests": dict(amount), "limits": dict(amount)},
                    "securityContext": _container_security(),
                }
            ],
            "volumes": _volumes(identity),
        },
    }


def _resources(job: KubernetesJob) -> dict[str, Any]:
    amount: dict[str, str] = {"cpu": str(job.cpus), "memory": f"{job.memory_mib}Mi"}
    if job.gpu is not None:
        amount[job.gpu.resource] = str(job.gpus)
    return {"requests": dict(amount), "limits": dict(amount)}


def compute_job(site: KubernetesSite, job: KubernetesJob, identity: Identity) -> dict[str, Any]:
    """The Job of the Attempt's compute stage (see the module doc)."""
    local = job.job
    workdir = repo_dir(site)
    if local.working_directory not in ("", "."):
        workdir = f"{workdir}/{local.working_directory.strip('/')}"
    env = [
        {"name": "HOME", "value": site.mount_path},
        {"name": "LANG", "value": "C.UTF-8"},
        *({"name": k, "value": literal(v)} for k, v in sorted(local.environment.items())),
        {"name": "METALLO_RUN_ID", "value": identity.run_id},
        {"name": "METALLO_ATTEMPT_ID", "value": identity.attempt_id},
        {"name": "METALLO_ATTEMPT_NUMBER", "value": str(identity.attempt_number)},
        {"name": "METALLO_WORKSPACE", "value": repo_dir(site)},
    ]
    resources = _resources(job)

    def container(name: str, argv: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "image": site.job_image,
            "command": [literal(arg) for arg in argv],
            "env": env,
            "workingDir": workdir,
            "volumeMounts": _mounts(site),
            "resources": resources,
            "securityContext": _container_security(),
        }

    steps = [step.to_argv() for step in local.steps]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": _security(job),
        "containers": [container("compute", steps[-1])],
        "volumes": _volumes(identity),
    }
    if len(steps) > 1:
        pod_spec["initContainers"] = [
            container(f"pre-{i}", argv) for i, argv in enumerate(steps[:-1])
        ]
    if job.gpu is not None and job.gpu.node_selector:
        pod_spec["nodeSelector"] = dict(job.gpu.node_selector)
    metadata = _metadata(identity, job.member.namespace, "compute")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": local.wall_time_seconds,
            "template": {
                "metadata": {
                    "labels": dict(metadata["labels"]),
                    "annotations": dict(metadata["annotations"]),
                },
                "spec": pod_spec,
            },
        },
    }
