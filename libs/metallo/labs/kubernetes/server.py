"""Wiring of the lab: store, admission, RBAC from governance, controllers, kubelet, HTTPS.

``python -m metallo.labs.kubernetes --state DIR --port 6443`` runs it in the
foreground (``scripts/k8s-lab`` daemonises it). Settings from the environment:

- ``METALLO_GOVERNANCE_FILE`` (default ``examples/governance.yaml``) and
  ``METALLO_K8S_LAB_SITE`` (default ``lab-k8s``): namespaces, members and roles;
  re-read when the file changes.
- ``METALLO_K8S_LAB_IMAGES``: comma-separated image patterns (fnmatch) the node "has"
  (default :data:`DEFAULT_IMAGES`).
- ``METALLO_K8S_LAB_NODE``: allocatable, e.g. ``cpu=8,memory=16Gi,pods=110,nvidia.com/gpu=0``;
  ``METALLO_K8S_LAB_NODE_LABELS``: extra node labels, e.g. ``metallo.io/gpu-class=a100``.
- ``METALLO_K8S_LAB_QUOTA``: the ResourceQuota ``hard`` each Project namespace gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from pathlib import Path

from aiohttp import web

from metallo.governance import GovernanceFile
from metallo.labs.kubernetes.admission import Admission
from metallo.labs.kubernetes.authz import MASTERS, Authorizer, Policy, Token
from metallo.labs.kubernetes.bootstrap import ensure_certificates, ensure_token, write_kubeconfig
from metallo.labs.kubernetes.gc import GarbageCollector
from metallo.labs.kubernetes.http_api import KubernetesApi
from metallo.labs.kubernetes.jobs import JobController
from metallo.labs.kubernetes.kubelet import Kubelet
from metallo.labs.kubernetes.pod_logs import PodLogs
from metallo.labs.kubernetes.policy import (
    ADMIN_USER,
    PROJECT_LABEL,
    RUNTIME_GROUPS,
    RUNTIME_USER,
    Layout,
    layout_from,
)
from metallo.labs.kubernetes.quota import QuotaAdmission, QuotaController
from metallo.labs.kubernetes.resources import NAMESPACES, NODES, QUOTAS
from metallo.labs.kubernetes.scheduler import node_object
from metallo.labs.kubernetes.store import SYSTEM, Store, UserInfo
from metallo.labs.kubernetes.volumes import PvcController

log = logging.getLogger("metallo.labs.kubernetes")

DEFAULT_IMAGES = ("metallo/*", "registry.metallo.lab/*", "busybox", "busybox:*", "python:*",
                  "docker.io/library/busybox*", "docker.io/library/python:*")
DEFAULT_NODE = "cpu=8,memory=16Gi,pods=110,ephemeral-storage=100Gi"
DEFAULT_QUOTA = "pods=100,requests.cpu=16,requests.memory=64Gi,persistentvolumeclaims=100,requests.storage=500Gi"
QUOTA_NAME = "metallo-quota"


def _pairs(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if "=" in p)


class Lab:
    """The running lab (see the module docstring)."""

    def __init__(self, state: Path, port: int, governance: Path, site: str) -> None:
        self.state = state
        self.port = port
        self.site = site
        self.governance = GovernanceFile(str(governance))
        self.store = Store()
        self._layout: tuple[object, Layout] | None = None
        self.tasks: list[asyncio.Task] = []

    def layout(self) -> Layout:
        """The governance layout, rebuilt when the file's snapshot changes."""
        snapshot = self.governance.current()
        if self._layout is None or self._layout[0] is not snapshot:
            self._layout = (snapshot, layout_from(snapshot, self.site))
            if self.tasks:
                self._ensure_namespaces()
        return self._layout[1]

    def _policy(self) -> Policy:
        return self.layout().policy

    def _ensure_namespaces(self) -> None:
        layout = self._layout[1] if self._layout else self.layout()
        for ns, project in layout.namespaces.items():
            if self.store.peek(NAMESPACES, None, ns) is None:
                self.store.create(NAMESPACES, None, {"metadata": {"name": ns, "labels": {PROJECT_LABEL: project}}},
                                  SYSTEM)
            if self.store.peek(QUOTAS, ns, QUOTA_NAME) is None:
                hard = _pairs(os.environ.get("METALLO_K8S_LAB_QUOTA", DEFAULT_QUOTA))
                self.store.create(QUOTAS, ns, {"metadata": {"name": QUOTA_NAME}, "spec": {"hard": hard}}, SYSTEM)
        if self.store.peek(NAMESPACES, None, "default") is None:
            self.store.create(NAMESPACES, None, {"metadata": {"name": "default"}}, SYSTEM)

    async def start(self) -> web.AppRunner:
        self.state.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state, 0o755)
        ca, cert, key = ensure_certificates(self.state)
        runtime_token = ensure_token(self.state / "runtime-token")
        admin_token = ensure_token(self.state / "admin-token")
        server = f"https://127.0.0.1:{self.port}"
        write_kubeconfig(self.state / "kubeconfig", server, ca, "site-runtime", runtime_token)
        write_kubeconfig(self.state / "admin.kubeconfig", server, ca, ADMIN_USER, admin_token)
        authorizer = Authorizer([Token(runtime_token, UserInfo(RUNTIME_USER, RUNTIME_GROUPS)),
                                 Token(admin_token, UserInfo(ADMIN_USER, (MASTERS, "system:authenticated")))],
                                self._policy)
        self.store.admission.append(Admission(lambda: self.layout().members))
        self.store.admission.append(QuotaAdmission(self.store))
        images = [p.strip() for p in os.environ.get("METALLO_K8S_LAB_IMAGES", ",".join(DEFAULT_IMAGES)).split(",")
                  if p.strip()]
        kubelet = Kubelet(self.store, self.state, images, self.port)
        kubelet.reset()
        self.kubelet = kubelet
        jobs, pvcs, gc, quotas = (JobController(self.store), PvcController(self.store, self.state / "volumes"),
                                  GarbageCollector(self.store), QuotaController(self.store))
        node = node_object(_pairs(os.environ.get("METALLO_K8S_LAB_NODE", DEFAULT_NODE)),
                           _pairs(os.environ.get("METALLO_K8S_LAB_NODE_LABELS", "")))
        self.store.create(NODES, None, {k: v for k, v in node.items() if k != "status"}, SYSTEM)
        self.store.mutate(NODES, None, node["metadata"]["name"], lambda o: o.__setitem__("status", node["status"]),
                          status=True)
        self.layout()
        self._ensure_namespaces()
        self.tasks = [asyncio.ensure_future(t.run()) for t in (jobs, pvcs, gc, quotas)]
        api = KubernetesApi(self.store, authorizer, PodLogs(self.store, kubelet.pod_dir, kubelet.running))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert), str(key))
        runner = web.AppRunner(api.app(), access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=context).start()
        log.info("Kubernetes lab listening on %s (state %s)", server, self.state)
        return runner

    async def stop(self, runner: web.AppRunner) -> None:
        for t in self.tasks:
            t.cancel()
        with contextlib.suppress(Exception):
            await self.kubelet.stop()
        await runner.cleanup()
