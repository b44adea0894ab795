"""Settings of the real-cluster lane (docs/k8s-lab.md, "A real cluster"): the same
executor lifecycle as tests/k8s, against the cluster ``METALLO_K8S_KUBECONFIG`` names.

Only environment variables configure it; the repository token is handed to the
helper Pods as their stage grant and is never printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from site_runtime.adaptors.kubernetes.settings import DEFAULT_HELPER
from site_runtime.application.site_access import RepositoryGrant
from tests.k8s.lab import RecordingGrants

VARIABLE = "METALLO_K8S_KUBECONFIG"


@dataclass(frozen=True)
class Cluster:
    """The real cluster and what the lane needs of it."""

    kubeconfig: Path  # the Runtime's identity (may impersonate ``member``)
    check_kubeconfig: Path  # reads the namespace for the checks
    namespace: str
    member: str
    run_as: str  # KUBERNETES_RUN_AS JSON: member (and the forbidden user) -> [uid, gid]
    forbidden_member: str  # a user the Runtime's ClusterRole may not impersonate
    image: str
    helper_command: str
    repository_url: str  # reachable from the Pods and from this host
    branch: str
    repository_username: str
    repository_token: str = field(repr=False)

    def executor_env(self) -> dict[str, str]:
        """``KUBERNETES_*`` settings for ``tests.k8s.lab.make_executor``."""
        env = {
            "KUBERNETES_NAMESPACE_TEMPLATE": self.namespace,
            "KUBERNETES_RUN_AS": self.run_as,
            "KUBERNETES_JOB_IMAGE": self.image,
            "KUBERNETES_HELPER_IMAGE": self.image,
            "KUBERNETES_HELPER_COMMAND": self.helper_command,
            "KUBERNETES_STAGING_SECONDS": "600",
        }
        storage_class = os.environ.get("METALLO_K8S_STORAGE_CLASS", "").strip()
        if storage_class:
            env["KUBERNETES_STORAGE_CLASS"] = storage_class
        return env

    def head(self) -> str:
        """The branch's commit, asked with this host's git credentials."""
        out = subprocess.run(
            ["git", "ls-remote", "--", self.repository_url, f"refs/heads/{self.branch}"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.split()
        if not out:
            raise AssertionError(f"{self.repository_url} has no branch {self.branch}")
        return out[0]


SKIP_REASON = (
    f"{VARIABLE} is not set: the real-cluster lane is opt-in (docs/k8s-lab.md); "
    "no cluster can run on these machines"
)


def cluster_from_env() -> Cluster | None:
    """The cluster of ``METALLO_K8S_KUBECONFIG``, None when it is unset. Raises
    ValueError naming a missing required setting."""
    kubeconfig = os.environ.get(VARIABLE, "").strip()
    if not kubeconfig:
        return None
    env = os.environ
    url = env.get("METALLO_K8S_REPOSITORY_URL", "").strip()
    if not url:
        raise ValueError("METALLO_K8S_REPOSITORY_URL is required with " + VARIABLE)
    member = env.get("METALLO_K8S_MEMBER", "alice")
    forbidden = env.get("METALLO_K8S_FORBIDDEN_MEMBER", "metallo-forbidden")
    uid = env.get("METALLO_K8S_MEMBER_UID", "1000")
    return Cluster(
        kubeconfig=Path(kubeconfig),
        check_kubeconfig=Path(env.get("METALLO_K8S_CHECK_KUBECONFIG") or kubeconfig),
        namespace=env.get("METALLO_K8S_NAMESPACE", "metallo-demo"),
        member=member,
        run_as=json.dumps({member: [int(uid), int(uid)], forbidden: [int(uid), int(uid)]}),
        forbidden_member=forbidden,
        image=env.get("METALLO_K8S_IMAGE", "metallo/platform:1"),
        helper_command=env.get("METALLO_K8S_HELPER_COMMAND") or json.dumps(list(DEFAULT_HELPER)),
        repository_url=url,
        branch=env.get("METALLO_K8S_REPOSITORY_BRANCH", "main"),
        repository_username=env.get("METALLO_K8S_REPOSITORY_USERNAME", "metallo"),
        repository_token=env.get("METALLO_K8S_REPOSITORY_TOKEN", ""),
    )


@dataclass
class ClusterGrants(RecordingGrants):
    """Stage grants carrying the lane's repository identity (recorded like the lab's)."""

    username: str = ""
    token: str = field(default="", repr=False)
    url: str = ""

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        grant = RepositoryGrant(
            f"g-{uuid.uuid4().hex[:12]}", self.username, self.token, self.url, ""
        )
        self.issued.append(grant)
        return grant
