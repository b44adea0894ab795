"""Admission and placement rules (seed 004 §3C, Pinned Run inputs) and the material digest."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from execution_core.application.settings import Settings
from execution_core.domain import reasons
from execution_core.domain.canonical import canonical_json, material_digest
from execution_core.domain.planning import (
    Binding,
    Plan,
    PlanningInput,
    Rejection,
    RevisionFacts,
    SiteFacts,
    SpecError,
    Wait,
    plan,
    retry_policy,
    wall_seconds,
)

COMMIT = "a" * 40
REV = RevisionFacts(
    workload_id="w1",
    project="demo",
    revision=3,
    repository_url="https://git.example/demo.git",
    action="train",
    action_type="slurm-job",
    family="queued-batch",
    environment="slurm",
    service_kind="",
    commit=COMMIT,
    branch="main",
    spec={
        "command": ["python", "train.py"],
        "resources": {"wallTimeSeconds": 7200, "gpus": 1, "gpuClass": "a100"},
        "retry": {"maxAttempts": 3, "backoffSeconds": 5},
    },
    spec_digest="sha256:" + "0" * 64,
)
SLURM = SiteFacts(
    "lab-slurm",
    "slurm",
    True,
    max_wall_seconds=86400,
    gpu_classes={"a100": "gpu:a100"},
    concurrent_run_limit=2,
)
K8S = SiteFacts("lab-k8s", "k8s", True)
BIND = {"lab-slurm": Binding("alice", "demo"), "lab-k8s": Binding("alice", "demo")}


def inp(**kw) -> PlanningInput:
    base = {
        "project": "demo",
        "member_id": "m-alice",
        "revision": REV,
        "sites": (SLURM, K8S),
        "bindings": BIND,
        "project_run_limit": 10,
        "active_in_project": 0,
        "active_per_site": {},
    }
    base.update(kw)
    return PlanningInput(**base)


def test_plan_picks_the_site_of_the_environment_and_pins_the_commit():
    p = plan(inp())
    assert isinstance(p, Plan)
    assert p.site_id == "lab-slurm" and p.environment == "slurm" and p.wall_seconds == 7200
    assert p.repository == {"url": REV.repository_url, "commit": COMMIT, "branch": "main"}
    assert p.member == {"id": "m-alice", "site_username": "alice", "account": "demo"}
    assert p.retry.max_attempts == 3 and p.retry.backoff_seconds == 5
    assert p.repositories[0]["role"] == "action" and p.repositories[0]["commit"] == COMMIT
    expected = hashlib.sha256(
        json.dumps(
            {"spec": REV.spec, "repository": p.repository, "member": p.member},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
    ).hexdigest()
    assert p.material_digest == expected == material_digest(REV.spec, p.repository, p.member)


def test_hand_off_commit_overrides_the_revision_commit():
    p = plan(inp(repository_commit="b" * 40))
    assert isinstance(p, Plan) and p.repository["commit"] == "b" * 40


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"revision": replace(REV, project="other")}, reasons.WORKLOAD_PROJECT_MISMATCH),
        (
            {
                "revision": replace(
                    REV,
                    environment="k8s",
                    spec={"command": ["x"], "resources": {"gpuClass": "a100"}},
                )
            },
            reasons.GPU_CLASS_UNAVAILABLE,
        ),
        ({"sites": (K8S,)}, reasons.NO_SITE_FOR_ENVIRONMENT),
        ({"bindings": {}}, reasons.MEMBER_BINDING_MISSING),
        ({"sites": (replace(SLURM, max_wall_seconds=3600),)}, reasons.WALL_TIME_ABOVE_LIMIT),
        (
            {"revision": replace(REV, spec={"retry": {"maxAttempts": 0}})},
            reasons.WORKLOAD_SPEC_INVALID,
        ),
        ({"revision": replace(REV, family="mystery")}, reasons.WORKLOAD_SPEC_INVALID),
    ],
)
def test_definite_rejections_carry_stable_codes(change, code):
    verdict = plan(inp(**change))
    assert isinstance(verdict, Rejection) and verdict.code == code


def test_not_ready_and_limits_wait():
    assert plan(inp(sites=(replace(SLURM, ready=False),))) == Wait(
        reasons.WAIT_SITE_NOT_READY, "no eligible Site is ready"
    )
    v = plan(inp(active_in_project=10))
    assert isinstance(v, Wait) and v.code == reasons.WAIT_CONCURRENT_RUN_LIMIT and v.limit == 10
    v = plan(inp(active_per_site={"lab-slurm": 2}))
    assert isinstance(v, Wait) and v.code == reasons.WAIT_CONCURRENT_RUN_LIMIT and v.limit == 2


def test_least_busy_eligible_site_is_chosen():
    other = replace(SLURM, site_id="lab-slurm-2")
    bindings = {**BIND, "lab-slurm-2": Binding("alice", "demo")}
    p = plan(inp(sites=(SLURM, other), bindings=bindings, active_per_site={"lab-slurm": 1}))
    assert isinstance(p, Plan) and p.site_id == "lab-slurm-2"


def test_services_are_never_reattempted_and_default_wall_time_applies_to_batch():
    svc = replace(
        REV,
        family="reconciled-service",
        environment="k8s",
        action_type="k8s-deployment",
        service_kind="application",
        spec={"command": ["serve"], "retry": {"maxAttempts": 4}},
    )
    p = plan(inp(revision=svc))
    assert isinstance(p, Plan) and p.retry.max_attempts == 1 and p.site_id == "lab-k8s"
    p = plan(inp(revision=replace(REV, spec={"command": ["x"]})))
    assert isinstance(p, Plan) and p.wall_seconds == 3600


def test_spec_readers_bound_their_inputs():
    assert wall_seconds({"resources": {"timeLimit": "1-00:00:10"}}) == 86410
    with pytest.raises(SpecError):
        retry_policy({"retry": {"maxAttempts": 11}})
    with pytest.raises(SpecError):
        retry_policy({"retry": {"backoffSeconds": True}})
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'


def test_settings_from_env():
    s = Settings.from_env(
        {
            "METALLO_EXECUTION_CORE_OBSERVE_INTERVAL_SECONDS": "0.5",
            "METALLO_EXECUTION_CORE_BATCH": "7",
        }
    )
    assert s.observe_interval_seconds == 0.5 and s.batch == 7 and s.timing().observe_interval == 0.5
    with pytest.raises(ValueError):
        Settings.from_env({"METALLO_EXECUTION_CORE_BATCH": "-1"})


def test_a_collection_childs_values_join_its_specification_with_their_own_digest():
    plain = plan(inp())
    child = plan(inp(parameters={"lr": "0.1"}))
    assert isinstance(plain, Plan) and isinstance(child, Plan)
    assert "parameters" not in plain.spec and plain.spec_digest == REV.spec_digest
    assert child.spec == {**REV.spec, "parameters": {"lr": "0.1"}}
    assert child.spec_digest.startswith("sha256:") and child.spec_digest != REV.spec_digest
    assert child.material_digest == material_digest(child.spec, child.repository, child.member)
    assert child.material_digest != plain.material_digest
