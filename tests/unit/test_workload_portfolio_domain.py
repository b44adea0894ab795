"""Pure domain rules: revision decisions, action type mapping, Git name checks."""

from __future__ import annotations

import pytest

from workload_portfolio.domain.action_types import ACTION_TYPES, action_type
from workload_portfolio.domain.refs import branch_problem, relative_path_problem
from workload_portfolio.domain.workload import decide


def test_decide_create_reuse_revise():
    assert decide(None, None) == ("create", 1)
    assert decide(3, 2) == ("reuse", 2)
    assert decide(3, None) == ("revise", 4)


def test_action_type_table_is_seed_004():
    rows = {(t.name, t.environment, t.family, t.service_kind) for t in ACTION_TYPES.values()}
    assert rows == {
        ("slurm-job", "slurm", "queued-batch", None),
        ("k8s-job", "k8s", "queued-batch", None),
        ("k8s-deployment", "k8s", "reconciled-service", "application"),
        ("k8s-inferenceservice", "k8s", "reconciled-service", "huggingface-inference"),
    }
    with pytest.raises(KeyError):
        action_type("nomad-job")


@pytest.mark.parametrize("name", ["main", "feature/x", "release-1.2", "a_b"])
def test_good_branches(name):
    assert branch_problem(name) is None


@pytest.mark.parametrize("name", ["", "-x", "a..b", "a b", "a~1", "x.lock", "a/", "/a", "a//b", "@", "a@{1}",
                                  ".hidden", "a/.b", "x" * 256, "a\x00b", "a:b", "a*b"])
def test_bad_branches(name):
    assert branch_problem(name) is not None


@pytest.mark.parametrize("path,ok", [("models/out", True), (".", True), ("a/./b", True), ("/etc", False),
                                     ("../x", False), ("a/../../x", False), ("a\\b", False), ("a\nb", False)])
def test_relative_paths(path, ok):
    assert (relative_path_problem(path) is None) is ok
