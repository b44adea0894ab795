"""Helpers for the kubernetes executor's tests on the Kubernetes lab (scripts/k8s-lab up;
docs/k8s-lab.md).

The executor talks to the lab with the Runtime's kubeconfig exactly as in production;
the checks read the lab with the administrator's kubeconfig. Execution authority and
repository grants (the Site edge) are recorded in memory — these tests exercise the
cluster, not the edge — and the repository is a bare Git repository over ``file://``
owned by the member, whom the lab's kubelet runs the Pods as.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.generic_client import ALL_NS
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import PersistentVolumeClaim, Pod, Secret

from site_runtime.adaptors.kubernetes.api import KubeApi
from site_runtime.adaptors.kubernetes.executor import KubernetesExecutor
from site_runtime.adaptors.kubernetes.factory import local_helper_argv
from site_runtime.adaptors.kubernetes.journal import KubernetesJournal
from site_runtime.adaptors.kubernetes.settings import settings_from_env
from site_runtime.application.delivery import EdgeRefused
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand
from site_runtime.application.site_access import RepositoryGrant
from site_runtime.domain.kubernetes_names import LABEL_ATTEMPT, label_value
from tests import lab_repos
from tests.lab_repos import git, queued_batch_payload

LAB = Path(os.environ.get("METALLO_K8S_LAB_STATE", "/var/lib/metallo-k8s-lab"))
KUBECONFIG = LAB / "kubeconfig"
ADMIN_KUBECONFIG = LAB / "admin.kubeconfig"
REPOS = Path(os.environ.get("METALLO_K8S_TEST_REPOS", "/var/tmp/metallo-k8s-tests"))
MEMBER = lab_repos.MEMBER
NAMESPACE = "metallo-demo"
KINDS = {"Job": Job, "Pod": Pod, "PersistentVolumeClaim": PersistentVolumeClaim, "Secret": Secret}


def admin(kubeconfig: Path = ADMIN_KUBECONFIG) -> Client:
    """A lightkube client with the lab administrator's kubeconfig (for checks), or
    ``kubeconfig`` (a real cluster's, tests/k8s_real)."""
    return Client(KubeConfig.from_file(kubeconfig), trust_env=False)


def objects_of(
    attempt_id: str, kubeconfig: Path = ADMIN_KUBECONFIG, namespace: str = ALL_NS
) -> dict[str, list[dict[str, Any]]]:
    """Every Job, Pod, PVC and Secret labelled with ``attempt_id``, by kind (read with
    ``kubeconfig`` in ``namespace``, all by default)."""
    client = admin(kubeconfig)
    selector = {LABEL_ATTEMPT: label_value(attempt_id)}
    found = {
        kind: [o.to_dict() for o in client.list(res, namespace=namespace, labels=selector)]
        for kind, res in KINDS.items()
    }
    client.close()
    return found


TEST_SITE_PREFIX = "lab-k8s-t"


def storage_quota_mib(namespace: str = NAMESPACE, kubeconfig: Path = ADMIN_KUBECONFIG) -> int:
    """The namespace's ResourceQuota ``requests.storage`` in MiB (Gi/Mi/Ti suffixes), read
    with ``kubeconfig``."""
    from lightkube.resources.core_v1 import ResourceQuota

    client = admin(kubeconfig)
    try:
        hard = next(iter(client.list(ResourceQuota, namespace=namespace))).spec.hard
    finally:
        client.close()
    value = hard["requests.storage"]
    units = {"Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}
    return int(value[:-2]) * units[value[-2:]]


def sweep(
    site_id: str | None = None, kubeconfig: Path = ADMIN_KUBECONFIG, namespace: str = ALL_NS
) -> int:
    """Delete every object the executor tests left (their Site label starts with
    :data:`TEST_SITE_PREFIX`, or is ``site_id``); returns how many. The lab is shared
    and its quota counts them."""
    client = admin(kubeconfig)
    selector = {"app.kubernetes.io/managed-by": "metallo"}
    swept = 0
    for kind in ("Job", "Pod", "Secret", "PersistentVolumeClaim"):
        for obj in client.list(KINDS[kind], namespace=namespace, labels=selector):
            site = (obj.metadata.labels or {}).get("metallo.dev/site", "")
            if site == site_id or (site_id is None and site.startswith(TEST_SITE_PREFIX)):
                with contextlib.suppress(Exception):
                    client.delete(
                        KINDS[kind],
                        obj.metadata.name,
                        namespace=obj.metadata.namespace,
                        grace_period=0,
                    )
                    swept += 1
    client.close()
    return swept


@dataclass
class RecordingAuthority:
    """The Site edge's ``authorise`` as a recorder; ``refuse`` makes it refuse."""

    requests: list[dict[str, str]] = field(default_factory=list)
    refuse: bool = False

    async def authorise_execution(self, request: dict[str, str]) -> dict[str, Any]:
        self.requests.append(dict(request))
        if self.refuse:
            raise EdgeRefused(
                403, "authorisation-refused", "refused", reason="member-not-in-project"
            )
        return {"authorised": True}


@dataclass
class RecordingGrants:
    """Repository grants kept in memory; tokens are recognisable so tests can search for them."""

    issued: list[RepositoryGrant] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        grant = RepositoryGrant(
            f"g-{uuid.uuid4().hex[:12]}",
            f"grant-{direction}",
            f"prt_{uuid.uuid4().hex}",
            "https://unused",
            "",
        )
        self.issued.append(grant)
        return grant

    async def release(self, grant_id: str) -> None:
        self.released.append(grant_id)


def make_executor(
    state_dir: Path,
    authority=None,
    grants=None,
    *,
    site_id: str | None = None,
    kubeconfig: Path = KUBECONFIG,
    fault=None,
    **env: Any,
) -> KubernetesExecutor:
    """An executor on the lab with its own Site id (so its list selects only its objects)."""
    values = {
        "KUBERNETES_KUBECONFIG": str(kubeconfig),
        "KUBERNETES_SITE_ID": site_id or f"{TEST_SITE_PREFIX}{uuid.uuid4().hex[:8]}",
        "KUBERNETES_RUN_AS": "passwd",
        "KUBERNETES_STAGING_SECONDS": "120",
        "KUBERNETES_RETENTION_SECONDS": "0",
        "KUBERNETES_POLL_SECONDS": "1",
        "KUBERNETES_MAX_WALL_SECONDS": "3600",
    }
    values.update({k: str(v) for k, v in env.items()})
    settings = settings_from_env(values, state_dir, helper_argv=local_helper_argv())
    return KubernetesExecutor(
        settings,
        KubernetesJournal(state_dir / "jobs.sqlite"),
        KubeApi(settings.kubeconfig),
        authority or RecordingAuthority(),
        grants or RecordingGrants(),
        fault=fault,
    )


def make_repository(files: dict[str, str] | None = None) -> tuple[str, str, Path]:
    """A bare repository owned by alice with one commit, in a directory the lab's Pods
    (running as alice) can read; returns (file URL, commit, path)."""
    return lab_repos.make_repository(files, root=REPOS)


git_out = git


def payload(
    url: str,
    commit: str,
    command: Any,
    member: dict[str, str] | None = None,
    pre: list[Any] | None = None,
    **resources: Any,
) -> dict[str, Any]:
    res = {"cpus": 1, "memoryMiB": 128, "gpus": 0, "wallTimeSeconds": 600}
    res.update(resources)
    environment = {"GREETING": "hello $(HOME) $$"}
    return queued_batch_payload(
        "k8s-job", url, commit, command, member, pre=pre, environment=environment, resources=res
    )


class Driver:
    """Sends numbered commands for one Attempt to an executor."""

    def __init__(self, site_id: str, attempt_id: str | None = None) -> None:
        self.site_id = site_id
        self.attempt_id = attempt_id or f"a-{uuid.uuid4().hex[:12]}"
        self.run_id = f"r-{uuid.uuid4().hex[:12]}"
        self.sequence = 0

    def command(
        self, kind: str, payload: dict[str, Any] | None = None, command_id: str | None = None
    ) -> SiteCommand:
        self.sequence += 1
        return SiteCommand(
            self.sequence,
            command_id or f"c-{uuid.uuid4().hex}",
            kind,
            self.site_id,
            "k8s",
            self.run_id,
            self.attempt_id,
            1,
            payload or {},
        )


async def observe_until(
    executor: KubernetesExecutor,
    driver: Driver,
    phases: set[str],
    timeout: float = 90.0,
    *,
    wait: str | None = None,
) -> CommandResult:
    """Observe every 0.5 s until the phase is in ``phases`` (and, with ``wait``, the
    observation carries that native-wait code)."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = await executor.observe(driver.command("observe"))
            obs = last.observation or {}
            if obs.get("phase") in phases and (wait is None or obs.get("native_wait") == wait):
                return last
        except Deferred:
            pass
        await asyncio.sleep(0.5)
    raise AssertionError(f"phase not in {phases} after {timeout}s: {last}")


async def started(executor: KubernetesExecutor, command: Any, **resources: Any) -> Driver:
    """A new Attempt of ``command`` on a fresh repository, prepared and started (both
    succeeded); its driver."""
    url, commit, _ = make_repository()
    drv = Driver(executor.site.site_id)
    prepared = await executor.prepare(
        drv.command("prepare", payload(url, commit, command, **resources))
    )
    assert prepared.outcome == "succeeded", prepared
    assert (await executor.start(drv.command("start"))).outcome == "succeeded"
    return drv
