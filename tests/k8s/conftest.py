"""Fixtures for the tests on the Kubernetes lab (marker ``k8s``; scripts/k8s-lab up)."""

from __future__ import annotations

import pytest

from tests.k8s.lab import RecordingAuthority, RecordingGrants, make_executor, sweep
from tests.k8s.lab_clients import admin, close, lab_problem, member


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/k8s/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.k8s)


@pytest.fixture(scope="session")
def k8s_lab() -> None:
    """Fails (never skips) when the lab is not running."""
    problem = lab_problem()
    if problem:
        pytest.fail(problem)


@pytest.fixture
def authority() -> RecordingAuthority:
    return RecordingAuthority()


@pytest.fixture
def grants() -> RecordingGrants:
    return RecordingGrants()


@pytest.fixture
async def executor(k8s_lab, tmp_path, authority, grants):
    ex = make_executor(tmp_path / "state", authority, grants)
    yield ex
    await ex.close()
    sweep(ex.site.site_id)


@pytest.fixture(scope="session", autouse=True)
def swept_lab(request):
    """Objects of earlier executor test runs go first (the namespace quota counts them),
    and this run's at the end."""
    if any("tests/k8s/test_kubernetes" in str(i.fspath) for i in request.session.items):
        if lab_problem() is None:
            sweep()
        yield
        if lab_problem() is None:
            sweep()
    else:
        yield


@pytest.fixture
async def kadmin(k8s_lab):
    client = admin()
    yield client
    await close(client)


@pytest.fixture
async def alice(k8s_lab):
    client = member("alice")
    yield client
    await close(client)


@pytest.fixture
async def bob(k8s_lab):
    client = member("bob")
    yield client
    await close(client)
