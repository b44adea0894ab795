"""Fixtures for the tests on the Kubernetes lab (marker ``k8s``; scripts/k8s-lab up)."""

from __future__ import annotations

import pytest

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
