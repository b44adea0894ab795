"""Shared values of the kubernetes executor's unit tests: a Site, a payload, fixtures."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from site_runtime.domain.kubernetes_batch import GpuClass, KubernetesSite

FIXTURES = Path(__file__).parent / "fixtures" / "kubernetes"
#: The Kubernetes version the manifests are validated for: the lab's reported
#: ``/version`` (docs/k8s-lab.md) and the oldest minor the executor supports.
K8S_VERSIONS = ("1.31.0", "1.33.0")

SITE = KubernetesSite(
    site_id="lab-k8s",
    job_image="metallo/job:1",
    helper_image="metallo/helper:1",
    helper_argv=(
        "python3",
        "-I",
        "-S",
        "/opt/metallo/pod_stage.py",
        "--runner",
        "/opt/metallo/stage_runner.py",
    ),
    run_as={"alice": (1001, 1001), "root": (0, 0)},
    gpu_classes={"a100": GpuClass("nvidia.com/gpu", {"metallo.dev/gpu-class": "a100"})},
    max_wall_seconds=86400,
)

PAYLOAD: dict[str, Any] = {
    "project": "demo",
    "workload_id": "w-1",
    "revision": 1,
    "action": "evaluate",
    "action_type": "k8s-job",
    "family": "queued-batch",
    "service_kind": None,
    "spec": {
        "command": {"argv": ["python", "evaluate.py", "--name", "my run", "$HOME", "*"]},
        "preCommands": [{"shell": "echo prepared > prepared.txt"}],
        "resources": {"cpus": 2, "memoryMiB": 4096, "gpus": 0, "wallTimeSeconds": 1800},
        "runtime": {"environment": {"PYTHONUNBUFFERED": "1"}, "workingDirectory": "."},
        "inputs": [],
    },
    "material_digest": "ab" * 32,
    "repository": {
        "url": "https://127.0.0.1:8443/git/demo.git",
        "commit": "c" * 40,
        "branch": "main",
    },
    "member": {"id": "m-alice", "site_username": "alice", "account": "demo"},
    "deadline": "2099-01-01T00:00:00Z",
}


def payload(**spec_changes: Any) -> dict[str, Any]:
    """A copy of :data:`PAYLOAD` with ``spec`` keys replaced."""
    body = copy.deepcopy(PAYLOAD)
    body["spec"].update(spec_changes)
    return body


def fixture(name: str) -> dict[str, Any]:
    """One JSON fixture file of ``fixtures/kubernetes``."""
    return json.loads((FIXTURES / name).read_text())
