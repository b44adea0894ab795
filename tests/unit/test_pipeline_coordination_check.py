"""Pipeline Coordination's permission check over the real governance file: an unknown
Project is said to be unknown, a known one refused names only itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from metallo.governance import GovernanceFile
from metallo.messaging import Rejected
from pipeline_coordination.adaptors.governance_authority import GovernanceAuthority
from pipeline_coordination.application.requests import check

GOVERNANCE = Path(__file__).resolve().parents[2] / "examples" / "governance.yaml"


@pytest.fixture
def authority() -> GovernanceAuthority:
    return GovernanceAuthority(GovernanceFile(GOVERNANCE))


def test_a_member_with_the_capability_passes(authority):
    check(authority, "demo", "m-alice", "pipelines.read")


@pytest.mark.parametrize("project, member, code", [
    ("nope", "m-alice", "project-not-found"),
    ("nope", "m-nobody", "project-not-found"),
    ("demo", "m-nobody", "permission-denied"),
])
def test_refusals_tell_an_unknown_project_from_a_refused_member(authority, project, member, code):
    with pytest.raises(Rejected) as refused:
        check(authority, project, member, "pipelines.read")
    assert refused.value.code == code
    assert "e2e" not in refused.value.message  # never another Project's name
