"""The ``start-array`` command's pure rules and array records (ADR 0032): the payload,
each task's material file and its loader, the result's ``array_tasks``, and how
slurmctld's and slurmdbd's array records are found by ``JOBID_TASK``. No Slurm
needed; the loader runs in a real bash."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from site_runtime.adaptors.slurm.array_scripts import LOADERS, array_scripts
from site_runtime.adaptors.slurm.responses import parse_jobs
from site_runtime.adaptors.slurm.scripts import scripts_for
from site_runtime.domain.slurm_array_start import (
    InvalidArrayRequest,
    array_tasks,
    material_bytes,
    material_file,
    parse_start_array,
    refused_name,
)
from site_runtime.domain.slurm_cancellation import task_cancelled
from site_runtime.domain.slurm_chain import decide_outcome, observed_phase
from site_runtime.domain.slurm_jobs import JobList, pending_indices

FIXTURES = Path(__file__).parent / "fixtures"


def payload(count: int = 3, **changes: Any) -> dict[str, Any]:
    tasks = [
        {"index": i, "run_id": f"r-{i}", "attempt_id": f"a-{i}", "attempt_number": 1}
        for i in range(count)
    ]
    return {"array": {"group_id": "g-1", "max_active": 0, "tasks": tasks, **changes}}


def test_a_start_array_payload_is_read_in_index_order_with_max_active_defaulting_to_n():
    body = payload()
    body["array"]["tasks"].reverse()
    start = parse_start_array(body, "a-0")
    assert start.attempt_ids == ("a-0", "a-1", "a-2")
    assert start.max_active == 3 and start.group_id == "g-1"
    assert parse_start_array(payload(max_active=2), "a-0").max_active == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b.pop("array"), "no array object"),
        (lambda b: b["array"].update(tasks=[]), "1 to 1000 tasks"),
        (lambda b: b["array"]["tasks"][1].update(index=0), "index 0 is named twice"),
        (lambda b: b["array"]["tasks"][1].update(index=3), "index must be an integer from 0 to 2"),
        (lambda b: b["array"]["tasks"][2].update(attempt_id="a-1"), "Attempt is named twice"),
        (lambda b: b["array"]["tasks"][0].update(attempt_number=True), "attempt_number"),
        (lambda b: b["array"].update(max_active=4), "max_active must be an integer from 1 to 3"),
        (lambda b: b["array"].update(group_id="../x"), "group_id is not a usable identifier"),
        (lambda b: b["array"]["tasks"][0].update(attempt_id="a-9"), "not the task at index 0"),
    ],
)
def test_a_malformed_start_array_payload_is_refused_with_what_is_wrong(change, message):
    body = payload()
    change(body)
    with pytest.raises(InvalidArrayRequest) as raised:
        parse_start_array(body, "a-0")
    assert message in str(raised.value)
    assert raised.value.code == "invalid-request"


def test_more_than_a_thousand_tasks_are_refused():
    with pytest.raises(InvalidArrayRequest):
        parse_start_array(payload(1001), "a-0")


def test_the_result_lists_every_task_with_its_job_in_each_stage():
    assert array_tasks(("a-0", "a-1"), {"stage-in": "7", "compute": "8", "stage-out": "9"}) == [
        {
            "index": i,
            "attempt_id": f"a-{i}",
            "native_jobs": [
                {"stage": "stage-in", "job_id": f"7_{i}"},
                {"stage": "compute", "job_id": f"8_{i}"},
                {"stage": "stage-out", "job_id": f"9_{i}"},
            ],
        }
        for i in range(2)
    ]


def load(tmp_path: Path, data: bytes, extra: str = 'printf "%s|%s" "$A" "$METALLO_PARAM_X"') -> str:
    """Run the loader (then ``extra``) for compute task 4 over a material file."""
    (tmp_path / material_file("compute", 4)).write_bytes(data)
    env = {
        "PATH": "/usr/bin:/bin",
        "METALLO_ARRAY_MATERIAL": str(tmp_path),
        "METALLO_STAGE": "compute",
        "SLURM_ARRAY_TASK_ID": "4",
    }
    done = subprocess.run(
        ["bash", "-c", LOADERS[1] + extra + "\n"], env=env, capture_output=True, text=True
    )
    return f"{done.returncode}:{done.stdout}"


def test_the_loader_exports_each_value_as_it_is_and_removes_the_file(tmp_path):
    hostile = "$(touch pwned) `id` ; x\nsecond line"
    out = load(tmp_path, material_bytes({"A": "1", "METALLO_PARAM_X": hostile}))
    assert out == f"0:1|{hostile}"
    assert not (tmp_path / "compute.4").exists() and not (tmp_path / "pwned").exists()
    assert not Path("pwned").exists()


def run_loader(folder: Path) -> subprocess.CompletedProcess[str]:
    env = {"METALLO_ARRAY_MATERIAL": str(folder), "METALLO_STAGE": "compute",
           "SLURM_ARRAY_TASK_ID": "4", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", LOADERS[1]], env=env, capture_output=True, text=True)


def test_the_loader_stops_the_task_without_its_own_regular_file(tmp_path):
    missing = run_loader(tmp_path)
    assert missing.returncode == 70 and "no material for array task 4" in missing.stdout
    (tmp_path / "elsewhere").write_bytes(material_bytes({"A": "1"}))
    os.symlink(tmp_path / "elsewhere", tmp_path / "compute.4")
    linked = run_loader(tmp_path)
    assert linked.returncode == 70 and "no material" in linked.stdout


def test_the_loader_refuses_an_entry_that_is_not_a_plain_name(tmp_path):
    assert load(tmp_path, b"BAD NAME=1\x00").startswith("70:")
    assert load(tmp_path, b"IFS=x\x00").startswith("70:")
    assert load(tmp_path, b"novalue\x00").startswith("70:")


def test_material_refuses_what_the_loader_would_refuse():
    assert refused_name([{"A": "1"}, {"IFS": " "}]) == "IFS"
    assert refused_name([{"A-B": "1"}]) == "A-B"
    assert refused_name([{"A": "1", "_B2": "2"}]) is None
    for bad in ({"IFS": "x"}, {"A": "nul\x00"}):
        with pytest.raises(ValueError):
            material_bytes(bad)
    assert material_bytes({"B": "2", "A": "1"}) == b"A=1\x00B=2\x00"


def test_an_array_script_is_the_loader_then_the_stage_script_byte_for_byte():
    for version in (1, 4):
        scripts = array_scripts(version)
        for stage, text in scripts_for(version).items():
            assert scripts[stage] == LOADERS[1] + text


@pytest.mark.parametrize(
    ("text", "indices"),
    [
        ("2-3%2", (2, 3)),
        ("[1,3-5]", (1, 3, 4, 5)),
        ("0-8:4", (0, 4, 8)),
        ("7", (7,)),
        ("", ()),
        (None, ()),
        ("1-x", ()),
    ],
)
def test_a_pending_array_record_names_the_tasks_it_still_holds(text, indices):
    assert pending_indices(text) == indices


def test_slurmctld_array_records_are_found_by_jobid_task():
    # The lab's slurmctld (v0.0.38): tasks 0 and 1 split and running, 2-3 pending (%2).
    body = json.loads((FIXTURES / "v0.0.38_jobs_array_split_and_pending.json").read_text())
    jobs = JobList(parse_jobs(body, "slurmctld"))
    assert (jobs.by_id["498_0"].job_id, jobs.by_id["498_0"].state) == ("499", "RUNNING")
    assert jobs.by_id["498_1"].job_id == "500"
    pending = jobs.by_id["498_3"]
    assert pending is jobs.by_id["498_2"] and pending.job_id == "498"
    assert (pending.state, pending.reason, pending.array_pending) == (
        "PENDING",
        "JobArrayTaskLimit",
        "2-3%2",
    )
    assert "498_4" not in jobs.by_id


def test_slurmdbd_answers_a_task_with_its_own_record():
    body = json.loads((FIXTURES / "dbv0.0.38_job_array_task.json").read_text())
    (job,) = parse_jobs(body, "slurmdbd")
    assert (job.job_id, job.array_job_id, job.array_task, job.task_ids) == (
        "501",
        "498",
        2,
        ("498_2",),
    )


def test_a_plain_job_has_no_array_fields():
    body = json.loads((FIXTURES / "v0.0.38_jobs.json").read_text())
    assert all(j.task_ids == () for j in parse_jobs(body, "slurmctld"))


class Row:
    def __init__(self, stage, job_id, native=None, state="submitted"):
        self.stage, self.job_id, self.native, self.state, self.refusal = (
            stage, job_id, native, state, None
        )


def test_an_array_child_is_queued_until_its_compute_task_starts():
    stages = {
        "stage-in": Row("stage-in", "7_1", {"state": "RUNNING"}),
        "compute": Row("compute", "8_1", {"state": "PENDING"}),
        "stage-out": Row("stage-out", "9_1", {"state": "PENDING"}),
    }
    assert observed_phase(False, stages) == "queued"
    stages["compute"].native = {"state": "RUNNING"}
    assert observed_phase(False, stages) == "running"
    # A single chain's stage-out job exists only after compute: running.
    single = {**stages, "compute": Row("compute", "8", {"state": "PENDING"}),
              "stage-out": Row("stage-out", "9")}
    assert observed_phase(False, single) == "running"


def test_an_accepted_cancel_of_every_task_ends_the_child_cancelled():
    stages = {s: Row(s, f"{n}_1", task_cancelled()) for s, n in
              (("stage-in", 7), ("compute", 8), ("stage-out", 9))}
    assert decide_outcome(stages, True).phase == "cancelled"
