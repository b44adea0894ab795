"""Fixtures for the tests on the real Slurm lab (marker ``slurm``; scripts/slurm-lab up)."""

from __future__ import annotations

import pytest

from tests.slurm.lab import LabTokens, RecordingGrants, lab_problem, make_executor


@pytest.fixture(scope="session")
def slurm_lab() -> None:
    """Fails (never skips) when the lab is not running."""
    problem = lab_problem()
    if problem:
        pytest.fail(problem)


@pytest.fixture
def tokens() -> LabTokens:
    return LabTokens()


@pytest.fixture
def grants() -> RecordingGrants:
    return RecordingGrants()


@pytest.fixture
async def executor(slurm_lab, tmp_path, tokens, grants):
    ex = make_executor(tmp_path / "state", tokens, grants)
    yield ex
    await ex.rest.close()
    ex.journal.close()
