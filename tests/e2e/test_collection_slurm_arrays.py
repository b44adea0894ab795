"""A 10-child collection with ``array: require`` on the Slurm lab through the whole dev
stack (ADR 0032): Pipeline Coordination launches every child at once in one array group,
Execution Core prepares each and sends ONE start-array, the Site Runtime submits exactly
three native array jobs (stage-in, compute, stage-out) of ten tasks each, and every child
goes on as its own Run: its own outcome, its own pushed commit. The child whose value is 7
fails its compute and fails only itself."""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict

import pytest

from tests.e2e.conftest import metallo, publish

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

SEEDS = [str(i) for i in range(10)]
CHILD = ('printf "%s\\n" "$METALLO_PARAM_SEED" > "out-$METALLO_PARAM_SEED.txt" && '
         'test "$METALLO_PARAM_SEED" != 7')
ACTIONS = f"""version: 1
actions:
  grid:
    type: slurm-job
    command: {{shell: '{CHILD}'}}
    resources: {{wallTimeSeconds: 300}}
    matrix:
      seed: [{", ".join(f'"{s}"' for s in SEEDS)}]
    maxActive: 10
    array: require
"""


@pytest.fixture(scope="module")
def slurm_stack(_stack_owner):
    """A fresh dev stack on the Slurm lab: databases dropped and the Runtime's journals
    cleared (``dev up --fresh``), so no stale stream state survives from another run."""
    from tests.slurm.lab import lab_problem

    problem = lab_problem()
    if problem:
        pytest.fail(problem)
    state = metallo("dev", "status", "--output", "json", timeout=60)
    if state.code == 0:
        metallo("dev", "down", timeout=180)
    up = metallo("dev", "up", "--executor", "slurm", "--fresh", timeout=400)
    if up.code != 0:
        pytest.fail(f"metallo dev up failed:\n{up.stderr[-3000:]}")
    _stack_owner.append(True)
    login = metallo("dev", "login", "m-alice", timeout=60)
    if login.code != 0:
        pytest.fail(f"metallo dev login failed:\n{login.stderr[-3000:]}")
    yield
    # The next module finds no stack and starts the one it needs.
    metallo("dev", "down", timeout=180)


def sacct_tasks(job_id: str, want: list[str], timeout: float = 60.0) -> list[str]:
    """The task ids (``JOBID_TASK``) Slurm's accounting holds of array job ``job_id``,
    read again until they are ``want`` or ``timeout`` seconds pass. slurmdbd takes
    slurmctld's records asynchronously: a finished one-task array reads as plain
    ``JOBID`` or ``JOBID_[0]`` until its task's own record lands."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-S", "now-1days", "-j", job_id, "-o", "jobid"],
                             capture_output=True, text=True, check=True).stdout
        tasks = sorted({line.strip() for line in out.splitlines() if line.strip()})
        if tasks == want or time.monotonic() > deadline:
            return tasks
        time.sleep(1.0)


def test_ten_children_are_three_slurm_arrays_each_child_its_own_run(slurm_stack, scratch_repo, tmp_path):
    url = publish(scratch_repo(ACTIONS), "e2e-arrays")
    done = metallo("pipeline", "run", url, "--wait", "--timeout", "170", "--quiet", "--output", "json",
                   timeout=200)
    p = done.json()["pipeline"]
    assert p["state"] == "failed", (p, done.stderr[-3000:])  # the one failing child fails the step
    (grid,) = p["steps"]
    assert grid["collection_counts"]["succeeded"] == 9 and grid["collection_counts"]["failed"] == 1

    shown = metallo("collection", "show", grid["collection_id"], "--output", "json", timeout=60)
    assert shown.code == 0, shown.stderr
    c = shown.json()
    assert c["array_decision"].startswith("array: require"), c["array_decision"]
    assert "then" not in c["array_decision"]  # no fallback happened
    by_seed = {i["parameters"]["seed"]: i for i in c["items"]}
    assert {s for s, i in by_seed.items() if i["state"] == "failed"} == {"7"}

    # Every child is its own Run, started as its own task of the one group's arrays.
    jobs: dict[str, set[str]] = defaultdict(set)
    commits = {}
    for seed, item in by_seed.items():
        run = metallo("run", "show", item["run_id"], "--output", "json", timeout=60).json()
        assert run["array_start"].startswith("array ") and run["array_start"].endswith(
            f" task {int(seed)}"), run["array_start"]
        native = {j["stage"]: j["job_id"] for j in run["attempts"][0]["native_jobs"]}
        assert set(native) == {"stage-in", "compute", "stage-out"}, native
        for stage, job in native.items():
            base, task = job.split("_")
            assert task == seed  # task i is the child at index i (values in file order)
            jobs[stage].add(base)
        if seed != "7":
            assert run["outcome"] == "succeeded" and len(run["output_commit"]) == 40
            commits[seed] = run["output_commit"]
        else:
            assert run["outcome"] == "failed"
    # Exactly three native array jobs, one per stage, of ten tasks each.
    assert all(len(bases) == 1 for bases in jobs.values()), jobs
    assert len({b for bases in jobs.values() for b in bases}) == 3
    for (base,) in jobs.values():
        want = sorted(f"{base}_{i}" for i in range(10))
        assert sacct_tasks(base, want) == want

    # Each succeeded child pushed its own commit holding its own value.
    assert len(set(commits.values())) == 9
    clone = tmp_path / "out"
    assert metallo("dev", "clone", url, str(clone), timeout=120).code == 0
    for seed, commit in commits.items():
        shown = subprocess.run(["git", "show", f"{commit}:out-{seed}.txt"], cwd=clone,
                               capture_output=True, text=True, check=True).stdout
        assert shown.split() == [seed]

    # rerun --failed: the nine that succeeded are carried over; the one that failed runs
    # again alone, as a one-task array group of its own (a group of ten would wait for
    # nine children that never launch again).
    again = metallo("pipeline", "rerun", p["pipeline_id"], "--failed", "--wait", "--timeout", "170",
                    "--quiet", "--output", "json", timeout=200)
    q = again.json()["pipeline"]
    (grid2,) = q["steps"]
    assert grid2["collection_counts"]["carried"] == 9, (grid2, again.stderr[-3000:])
    rerun = metallo("collection", "show", grid2["collection_id"], "--output", "json", timeout=60).json()
    (child,) = [i for i in rerun["items"] if not i.get("carried_from")]
    assert child["parameters"]["seed"] == "7" and child["state"] == "failed"  # still exits 1
    assert "then" not in rerun["array_decision"], rerun["array_decision"]
    run = metallo("run", "show", child["run_id"], "--output", "json", timeout=60).json()
    assert run["array_start"].startswith("array ") and run["array_start"].endswith(" task 0"), run
    for job in run["attempts"][0]["native_jobs"]:
        base, task = job["job_id"].split("_")
        assert task == "0" and sacct_tasks(base, [f"{base}_0"]) == [f"{base}_0"]
