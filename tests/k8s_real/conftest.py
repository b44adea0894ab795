"""Fixtures of the real-cluster lane (marker ``k8s_real``; opt-in with
``METALLO_K8S_KUBECONFIG``; docs/k8s-lab.md)."""

from __future__ import annotations

import pytest

from tests.k8s.lab import RecordingAuthority, make_executor, sweep
from tests.k8s_real.cluster import Cluster, ClusterGrants, cluster_from_env


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/k8s_real/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.k8s_real)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    found = cluster_from_env()
    assert found is not None  # the test modules skip at collection without it
    return found


@pytest.fixture
def authority() -> RecordingAuthority:
    return RecordingAuthority()


@pytest.fixture
def grants(cluster) -> ClusterGrants:
    return ClusterGrants(
        username=cluster.repository_username,
        token=cluster.repository_token,
        url=cluster.repository_url,
    )


@pytest.fixture
async def executor(cluster, tmp_path, authority, grants):
    ex = make_executor(
        tmp_path / "state",
        authority,
        grants,
        kubeconfig=cluster.kubeconfig,
        **cluster.executor_env(),
    )
    yield ex
    await ex.close()
    sweep(ex.site.site_id, cluster.check_kubeconfig, cluster.namespace)
