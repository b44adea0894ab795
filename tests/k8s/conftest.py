"""Fixtures for the tests on the Kubernetes lab (marker ``k8s``; scripts/k8s-lab up)."""

from __future__ import annotations

import pytest

from tests.k8s.lab import RecordingAuthority, RecordingGrants, lab_problem, make_executor


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
