"""The rules of a collection as Slurm arrays (domain/slurm_arrays.py, ADR 0032):
homogeneity, the ``--array`` spec, identities, ``aftercorr``, the index ↔ Attempt
mapping and ``JOBID_TASK`` ids. No Slurm needed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from site_runtime.domain.slurm_arrays import (
    MAX_ARRAY_TASKS,
    ArrayMember,
    ArrayTaskId,
    NotHomogeneous,
    TaskMapping,
    aftercorr,
    array_identity,
    array_spec,
    array_stage_request,
    child_tasks,
    homogeneity_reason,
    parse_task_job_id,
    task_job_id,
)

BASE: dict[str, Any] = {
    "binding": {"member": "m-alice", "user": "alice", "account": "demo"},
    "repository": {
        "url": "file:///repo.git",
        "commit": "c" * 40,
        "branch": "main",
        "output_branch": "metallo/out",
    },
    "commands": [{"argv": ["echo", "hi"]}],
    "environment": {"METALLO_PARAM_X": "1"},
    "working_directory": ".",
    "compute": {
        "partition": "batch",
        "cpus": 1,
        "memory_mib": 128,
        "nodes": 1,
        "time_minutes": 10,
        "tres_per_node": None,
    },
    "staging": {"cpus": 1, "memory_mib": 128, "time_minutes": 10, "partition": "staging"},
    "prefix": "metallo",
    "workspace_root": "/ws",
    "repository_ca": None,
    "deadline_epoch": None,
    "script_version": 2,
}


def member(i: int, **changes: Any) -> ArrayMember:
    record = copy.deepcopy(BASE)
    record["environment"] = {"METALLO_PARAM_X": str(i)}
    record["repository"]["output_branch"] = f"metallo/out-{i}"
    for path, value in changes.items():
        target = record
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return ArrayMember(f"r-{i}", f"a-{i}", 1, record)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({}, None),
        ({"environment": {"METALLO_PARAM_X": "other"}}, None),  # values differ per task
        ({"commands": [{"argv": ["true"]}]}, None),
        ({"repository__commit": "d" * 40}, None),  # commits are per task material
        (
            {"compute__partition": "gpu"},
            "compute.partition differs: a-1 has 'gpu', a-0 has 'batch'",
        ),
        ({"compute__cpus": 4}, "compute.cpus differs: a-1 has 4, a-0 has 1"),
        ({"compute__tres_per_node": "gres/gpu:1"}, "compute.tres_per_node differs"),
        ({"staging__partition": "batch"}, "staging.partition differs"),
        ({"binding__user": "bob"}, "binding.user differs: a-1 has 'bob', a-0 has 'alice'"),
        ({"binding__account": "other"}, "binding.account differs"),
        ({"script_version": 1}, "script_version differs: a-1 has 1, a-0 has 2"),
        ({"repository__url": "file:///other.git"}, "repository.url differs"),
        ({"deadline_epoch": 5.0}, "deadline_epoch differs"),
        ({"prefix": "other"}, "prefix differs"),
    ],
)
def test_homogeneity_names_the_first_difference(change, reason):
    members = [member(0), member(1, **change), member(2)]
    found = homogeneity_reason(members)
    if reason is None:
        assert found is None
    else:
        assert found is not None and found.startswith(reason), found


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ([], "an array needs at least one Attempt"),
        ([member(0), member(0)], "Attempt a-0 is named twice"),
        ([member(0)] * (MAX_ARRAY_TASKS + 1), "1001 Attempts exceed the array bound of 1000"),
    ],
)
def test_homogeneity_bounds(members, reason):
    assert homogeneity_reason(members) == reason


@pytest.mark.parametrize(
    ("tasks", "max_active", "spec"),
    [(1, None, "0-0"), (3, None, "0-2"), (3, 2, "0-2%2"), (10, 3, "0-9%3"), (1000, 1, "0-999%1")],
)
def test_array_spec(tasks, max_active, spec):
    assert array_spec(tasks, max_active) == spec


@pytest.mark.parametrize(("tasks", "max_active"), [(0, None), (1001, None), (3, 0), (3, -1)])
def test_array_spec_refuses_out_of_bounds(tasks, max_active):
    with pytest.raises(ValueError):
        array_spec(tasks, max_active)


@pytest.mark.parametrize(
    ("stage", "name", "comment"),
    [
        ("stage-in", "metallo-g1-in", "metallo:g1:stage-in"),
        ("compute", "metallo-g1", "metallo:g1:compute"),
        ("stage-out", "metallo-g1-out", "metallo:g1:stage-out"),
    ],
)
def test_array_identity(stage, name, comment):
    ident = array_identity("metallo", "g1", stage, "demo", "alice")
    assert (ident.name, ident.comment, ident.account, ident.user) == (
        name,
        comment,
        "demo",
        "alice",
    )


@pytest.mark.parametrize(("stage", "group"), [("setup", "g1"), ("compute", "g 1"), ("compute", "")])
def test_array_identity_refuses_bad_input(stage, group):
    with pytest.raises(ValueError):
        array_identity("metallo", group, stage, "demo", "alice")


@pytest.mark.parametrize(
    ("after", "dependency"), [(None, None), ("41", "aftercorr:41"), ("123456", "aftercorr:123456")]
)
def test_aftercorr(after, dependency):
    assert aftercorr(after) == dependency


@pytest.mark.parametrize("after", ["41_0", "41,42", "x", "41?afterany:1"])
def test_aftercorr_takes_only_an_array_job_number(after):
    with pytest.raises(ValueError):
        aftercorr(after)


def test_mapping_is_index_to_attempt_both_ways():
    mapping = TaskMapping(("a-7", "a-3", "a-5"))
    assert [mapping.index_of(a) for a in ("a-7", "a-3", "a-5")] == [0, 1, 2]
    assert [mapping.attempt_at(i) for i in range(3)] == ["a-7", "a-3", "a-5"]
    assert mapping.indices() == {"a-7": 0, "a-3": 1, "a-5": 2}
    assert TaskMapping.from_indices({"a-5": 2, "a-7": 0, "a-3": 1}) == mapping
    with pytest.raises(KeyError):
        mapping.index_of("a-9")
    with pytest.raises(KeyError):
        mapping.attempt_at(3)
    with pytest.raises(KeyError):
        mapping.attempt_at(-1)


@pytest.mark.parametrize(
    "attempts", [(), ("a-1", "a-1"), ("a 1",), tuple(f"a-{i}" for i in range(1001))]
)
def test_mapping_refuses_bad_groups(attempts):
    with pytest.raises(ValueError):
        TaskMapping(attempts)


@pytest.mark.parametrize(
    "indices", [{"a-1": 1, "a-2": 2}, {"a-1": 0, "a-2": 0}, {"a-1": 0, "a-2": 2}, {}]
)
def test_mapping_from_saved_indices_needs_zero_to_n_minus_one(indices):
    with pytest.raises(ValueError):
        TaskMapping.from_indices(indices)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("123_0", ArrayTaskId("123", 0)),
        ("123_45", ArrayTaskId("123", 45)),
        ("007_2", ArrayTaskId("7", 2)),
    ],
)
def test_parse_task_job_id(value, parsed):
    assert parse_task_job_id(value) == parsed
    assert task_job_id(parsed.array_job_id, parsed.task) == str(parsed)


@pytest.mark.parametrize(
    "value",
    ["123", "123_", "_4", "123_[0-2%3]", "123_1_2", "123_-1", "a_1", "123_1000", " 123_1", None],
)
def test_parse_task_job_id_refuses_other_forms(value):
    with pytest.raises(ValueError):
        parse_task_job_id(value)


def test_task_job_id_refuses_bad_parts():
    for array_job_id, task in (("12x", 0), ("12", -1), ("12", 1000)):
        with pytest.raises(ValueError):
            task_job_id(array_job_id, task)


@pytest.mark.parametrize("stage", ["stage-in", "compute", "stage-out"])
def test_array_stage_request_shares_what_tasks_share(stage):
    members = [member(0), member(1), member(2)]
    after = None if stage == "stage-in" else "99"
    req = array_stage_request(
        members, group_id="g1", stage=stage, after=after, max_active=2, script="#!/bin/sh\n"
    )
    job = req.job
    assert job["array"] == "0-2%2"
    assert job["hold"] is True and job["requeue"] is False
    assert job["name"] == array_identity("metallo", "g1", stage, "demo", "alice").name
    assert job["comment"] == f"metallo:g1:{stage}"
    assert job.get("dependency") == (None if after is None else "aftercorr:99")
    assert job["standard_output"] == f"/ws/metallo-g1.{stage}.%a.log"
    # nothing that names one task sits in the shared request
    assert "METALLO_ATTEMPT_ID" not in job["environment"]
    assert job["environment"]["METALLO_ARRAY_TASKS"] == "3"
    assert [req.task_environment[i]["METALLO_ATTEMPT_ID"] for i in range(3)] == [
        "a-0",
        "a-1",
        "a-2",
    ]
    if stage == "compute":
        assert job["partition"] == "batch"
        assert [req.task_environment[i]["METALLO_PARAM_X"] for i in range(3)] == ["0", "1", "2"]
    else:
        assert job["partition"] == "staging"
    if stage == "stage-out":
        assert req.task_environment[2]["METALLO_OUTPUT_BRANCH"] == "metallo/out-2"
    # a task's full environment is the shared part plus its own
    for i in range(3):
        assert not set(req.task_environment[i]) & set(job["environment"])


def test_array_stage_request_refuses_a_mixed_group():
    with pytest.raises(NotHomogeneous) as raised:
        array_stage_request(
            [member(0), member(1, compute__memory_mib=512)],
            group_id="g1",
            stage="compute",
            after="1",
            max_active=None,
            script="",
        )
    assert raised.value.code == "array-not-homogeneous"
    assert "compute.memory_mib differs" in raised.value.reason


@pytest.mark.parametrize(
    ("array_job_ids", "attempt", "tasks"),
    [
        (
            {"stage-in": "10", "compute": "11", "stage-out": "12"},
            "a-5",
            {"stage-in": "10_1", "compute": "11_1", "stage-out": "12_1"},
        ),
        ({"stage-in": "10", "compute": None, "stage-out": None}, "a-7", {"stage-in": "10_0"}),
        ({}, "a-3", {}),
    ],
)
def test_a_child_is_its_index_in_every_submitted_array(array_job_ids, attempt, tasks):
    assert child_tasks(array_job_ids, TaskMapping(("a-7", "a-5", "a-3")), attempt) == tasks


def test_a_child_outside_the_group_has_no_tasks():
    with pytest.raises(KeyError):
        child_tasks({"compute": "11"}, TaskMapping(("a-7",)), "a-9")
