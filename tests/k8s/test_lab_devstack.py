"""``metallo dev up`` starts the Kubernetes lab and records its kubeconfig."""

from __future__ import annotations

import pytest

from metallo.devstack.k8s_lab import ensure_k8s_lab, k8s_lab_status
from tests.k8s.lab_clients import STATE

pytestmark = pytest.mark.k8s


def test_the_dev_stack_starts_and_reports_the_lab(k8s_lab):
    said: list[str] = []
    found = ensure_k8s_lab(said.append)  # idempotent: the lab already runs
    assert found == k8s_lab_status()
    assert found["running"] and found["kubeconfig"] == str(STATE / "kubeconfig")
    assert said == [f"Kubernetes lab: {found['detail']}, kubeconfig {STATE / 'kubeconfig'}"]
    assert found["detail"].startswith("https://127.0.0.1:") and "(answers)" in found["detail"]
