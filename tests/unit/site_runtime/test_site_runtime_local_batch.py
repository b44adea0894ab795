"""Pure rules of the local executor: reading the prepare payload, refusals, and the
phase mapping of docs/site-commands.md."""

from __future__ import annotations

import pytest

from site_runtime.domain.local_batch import (
    InvalidMaterial,
    Machine,
    StageFacts,
    failure_record,
    observation,
    parse_job,
    prepared_job,
)


def payload(**spec_changes):
    spec = {
        "command": {"argv": ["python", "train.py"]},
        "preCommands": [],
        "resources": {"wallTimeSeconds": 120},
        "runtime": {"environment": {"A": "1"}, "workingDirectory": "."},
        "inputs": [],
    }
    spec.update(spec_changes)
    return {
        "spec": spec,
        "material_digest": "d" * 64,
        "repository": {"url": "https://git.example/demo.git", "commit": "a" * 40, "branch": "main"},
        "member": {"id": "m-alice", "site_username": "alice", "account": "demo"},
    }


def test_argv_shell_and_bare_list_commands():
    job = parse_job(payload(preCommands=[["pip", "install", "x"], {"shell": "echo $A"}]))
    assert [s.to_argv() for s in job.steps] == [
        ["pip", "install", "x"],
        ["/bin/sh", "-c", "echo $A"],
        ["python", "train.py"],
    ]
    assert job.wall_time_seconds == 120 and job.environment == {"A": "1"}
    assert parse_job(payload(command=["a b"])).steps[-1].to_argv() == ["a b"]


@pytest.mark.parametrize(
    "change,code",
    [
        ({"command": "python train.py"}, "invalid-material"),  # a bare string is ambiguous
        ({"command": {"argv": []}}, "invalid-material"),
        ({"command": {"argv": ["x"], "shell": "y"}}, "invalid-material"),
        ({"runtime": {"environment": {"METALLO_X": "1"}}}, "invalid-material"),
        ({"runtime": {"environment": {"A": 1}}}, "invalid-material"),
        ({"runtime": {"workingDirectory": "../elsewhere"}}, "invalid-material"),
        ({"resources": {"wallTimeSeconds": 0}}, "invalid-material"),
        ({"inputs": [{"name": "data"}]}, "unsupported-local-inputs"),
    ],
)
def test_refusals(change, code):
    with pytest.raises(InvalidMaterial) as refused:
        parse_job(payload(**change))
    assert refused.value.code == code


def test_wall_time_above_the_site_limit_is_refused():
    with pytest.raises(InvalidMaterial) as refused:
        parse_job(payload(resources={"wallTimeSeconds": 7200}), max_wall_seconds=3600)
    assert refused.value.code == "local-wall-time-above-limit"


def test_repository_must_be_pinned():
    bad = payload()
    bad["repository"]["commit"] = "main"
    with pytest.raises(InvalidMaterial):
        parse_job(bad)


@pytest.mark.parametrize(
    ("url", "accepted"),
    [
        ("https://git.example/demo.git", True),
        ("file:///srv/git/demo.git", True),
        ("/srv/git/demo.git", True),  # what `metallo action run ./repo` records
        ("relative/demo.git", False),
        ("ssh://git.example/demo.git", False),
        ("-uhack", False),
    ],
)
def test_repository_url_forms(url, accepted):
    p = payload()
    p["repository"]["url"] = url
    if accepted:
        assert parse_job(p).repository_url == url
    else:
        with pytest.raises(InvalidMaterial, match="absolute path"):
            parse_job(p)


def test_phases_follow_the_stages():
    at = "2026-11-29T11:00:00Z"
    assert observation("prepared", [], at)["phase"] == "prepared"
    assert observation("stage-in", [StageFacts("stage-in", "running", 10)], at)["phase"] == "queued"
    assert observation("compute", [], at)["phase"] == "running"
    assert observation("stage-out", [], at)["phase"] == "running"
    done = observation(
        "succeeded",
        [
            StageFacts("compute", "succeeded", 11, 0),
            StageFacts("stage-out", "succeeded", 12, 0, output_commit="b" * 40),
        ],
        at,
    )
    assert (done["phase"], done["exit_code"], done["output_commit"]) == ("succeeded", 0, "b" * 40)


def test_the_native_stage_is_the_stage_running_or_the_one_that_ended_it():
    at = "2026-11-29T11:00:00Z"
    assert observation("prepared", [], at)["native_stage"] is None
    assert observation("waiting", [], at)["native_stage"] is None
    assert observation("compute", [StageFacts("compute", "running", 2)], at)["native_stage"] == "compute"
    failed = [StageFacts("stage-in", "failed", 1, 75)]
    assert observation("failed", failed, at)["native_stage"] == "stage-in"
    assert observation("succeeded", [], at)["native_stage"] == "stage-out"


def test_failure_record_is_bounded_facts_only():
    stage = StageFacts("compute", "failed", 42, None, 9, "wall-time-exceeded")
    assert failure_record(stage) == {
        "stage": "compute",
        "scheduler_state": "TIMEOUT",
        "job_id": "42",
        "exit_code": None,
        "signal": 9,
        "code": "wall-time-exceeded",
    }
    failed = observation(
        "failed",
        [StageFacts("stage-in", "succeeded", 1, 0), StageFacts("compute", "failed", 2, 3)],
        "t",
    )
    assert failed["failure"]["code"] == "compute-failed" and failed["exit_code"] == 3


def test_deadline_is_read_and_compared_in_utc():
    from datetime import UTC, datetime

    job = parse_job({**payload(), "deadline": "2026-11-29T12:00:00Z"})
    assert not job.deadline_passed(datetime(2026, 11, 29, 11, 59, 59, tzinfo=UTC))
    assert job.deadline_passed(datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC))
    for bad in ("tomorrow", "2026-11-29T12:00:00"):
        with pytest.raises(InvalidMaterial):
            parse_job({**payload(), "deadline": bad})


def test_a_cancelled_attempt_reports_how_its_step_was_stopped():
    cancelled = observation(
        "cancelled",
        [StageFacts("stage-in", "succeeded", 1, 0), StageFacts("compute", "cancelled", 2, None, 15, "cancelled")],
        "t",
    )
    assert (cancelled["phase"], cancelled["exit_code"], cancelled["signal"]) == ("cancelled", None, 15)


def test_native_states_use_a_schedulers_words_and_the_stage_says_which_runs():
    at = "2026-11-29T11:00:00Z"
    for state in ("stage-in", "compute", "stage-out"):
        seen = observation(state, [StageFacts(state, "running", 2)], at)
        assert (seen["native_stage"], seen["native_state"]) == (state, "RUNNING")
    assert observation("waiting", [], at)["native_state"] == "PENDING"
    assert observation("succeeded", [], at)["native_state"] == "COMPLETED"


@pytest.mark.parametrize(("resources", "said"), [
    ({"cpus": 9}, "resources.cpus 9 can never fit this machine, which has 8 CPUs; lower resources.cpus "
                  "in actions.yaml to at most 8"),
    ({"cpus": 2, "memoryMiB": 16385}, "resources.memoryMiB 16385 can never fit this machine, which has "
                                      "16384 MiB of memory"),
])
def test_a_request_larger_than_the_machine_never_fits(resources, said):
    machine = Machine(cpus=8, memory_mib=16384)
    with pytest.raises(InvalidMaterial) as refused:
        prepared_job("r-1", "a-1", payload(resources=resources), None, machine)
    assert refused.value.code == "local-request-never-fits"
    assert said in str(refused.value)


def test_a_request_the_machine_holds_or_an_unknown_machine_is_prepared():
    fits = payload(resources={"cpus": 8, "memoryMiB": 16384, "gpus": 2})
    assert prepared_job("r-1", "a-1", fits, None, Machine(cpus=8, memory_mib=16384)).steps
    big = payload(resources={"cpus": 10_000})
    assert prepared_job("r-1", "a-1", big, None, None).steps  # the machine unknown: not checked


def test_this_machine_reads_the_hosts_cpus_and_memory():
    import os

    from site_runtime.adaptors.local.settings import this_machine

    machine = this_machine()
    assert machine is not None and machine.cpus == os.cpu_count()
    with open("/proc/meminfo") as meminfo:
        total_kib = int(meminfo.readline().split()[1])
    assert abs(machine.memory_mib - total_kib // 1024) <= 1
