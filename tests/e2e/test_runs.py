"""Single Runs end to end on the dev stack with the local executor: a cancelled
Run, a failing action whose failure facts and logs can be read, and a running
action's log followed as it grows."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from tests.e2e.conftest import ENV, METALLO, PROJECT, ROOT, metallo, publish

pytestmark = pytest.mark.e2e

ACTIONS = """version: 1
actions:
  nap:
    type: slurm-job
    command: [sleep, "600"]
    resources: {wallTimeSeconds: 900}
  broken:
    type: slurm-job
    command: [python3, broken.py]
    resources: {wallTimeSeconds: 300}
  epochs:
    type: slurm-job
    command: [python3, -u, epochs.py]
    resources: {wallTimeSeconds: 300}
"""
EPOCHS = """import time
for epoch in range(1, 9):
    print(f"epoch {epoch}: loss {1 / epoch:.3f} ✓")
    time.sleep(1.5)
"""
BROKEN = """import sys
print("computing the answer")
print("e2e-marker: the data file is missing", file=sys.stderr)
sys.exit(3)
"""


@pytest.fixture(scope="module")
def repository(local_stack, tmp_path_factory):
    repo = tmp_path_factory.mktemp("e2e-repo")
    (repo / "actions.yaml").write_text(ACTIONS)
    (repo / "broken.py").write_text(BROKEN)
    (repo / "epochs.py").write_text(EPOCHS)
    return publish(repo, "e2e")


def launch(repository: str, action: str) -> str:
    done = metallo("action", "run", repository, action, "--output", "json", timeout=120)
    assert done.code == 0, done.stderr
    return done.json()["launch"]["run_id"]


def test_a_running_run_is_cancelled(repository):
    run_id = launch(repository, "nap")
    deadline = time.monotonic() + 240
    while True:
        run = metallo("run", "show", run_id, "--output", "json").json()
        if run["phase"] == "running" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert run["phase"] == "running", run
    cancelled = metallo("run", "cancel", run_id, "--reason", "e2e", "--wait", "--timeout", "240",
                        "--output", "json", timeout=300)
    assert cancelled.code == 0, cancelled.stderr
    document = cancelled.json()
    assert document["cancel"]["cancel_recorded"] is True
    assert document["run"]["outcome"] == "cancelled"
    waited = metallo("run", "wait", run_id, "--quiet")
    assert waited.code == 1  # cancelled → exit 1


def test_a_failing_action_reports_its_exit_and_logs(repository):
    run_id = launch(repository, "broken")
    waited = metallo("run", "wait", run_id, "--timeout", "300", "--output", "json", timeout=360)
    assert waited.code == 1, waited.stderr
    run = waited.json()
    assert run["outcome"] == "failed"
    assert run["exit"]["exit_code"] == 3 and run["exit"]["failure_stage"] == "compute"
    logs = metallo("run", "logs", run_id, "--stage", "compute", timeout=120)
    assert logs.code == 0, logs.stderr
    assert "e2e-marker: the data file is missing" in logs.stdout


def test_a_running_actions_log_is_followed_until_the_run_ends(repository):

    run_id = launch(repository, "epochs")
    follower = subprocess.Popen([*METALLO, "run", "logs", run_id, "--follow"], cwd=ROOT,
                                env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    # stderr is drained beside stdout; a follow that has not ended in 240 s is stopped,
    # and the failure shows what it said.
    said: list[str] = []
    drain = threading.Thread(target=lambda: said.append(follower.stderr.read()), daemon=True)
    drain.start()
    watchdog = threading.Timer(240, follower.kill)
    watchdog.start()
    try:
        first = ""
        for line in follower.stdout:  # the stage runner's own lines come first
            first += line
            if not line.startswith("[metallo "):
                break
        # The first epoch arrived while the action still ran (it takes 12 s).
        assert first.endswith("epoch 1: loss 1.000 ✓\n"), first
        assert metallo("run", "show", run_id, "--output", "json").json()["phase"] != "terminal"
        # Read the rest through the same buffered reader: communicate() reads the
        # pipe itself and would drop lines the loop above had already buffered.
        timer = threading.Timer(360, follower.kill)
        timer.start()
        rest, errors = follower.stdout.read(), follower.stderr.read()
        follower.wait()
        timer.cancel()
    finally:
        watchdog.cancel()
        follower.kill()
        drain.join(timeout=30)
    errors = "".join(said)
    assert follower.returncode == 0, (errors, metallo("run", "show", run_id).stdout)
    expected = "".join(f"epoch {e}: loss {1 / e:.3f} ✓\n" for e in range(1, 9))
    printed = [line for line in (first + rest).splitlines(True) if not line.startswith("[metallo ")]
    assert "".join(printed) == expected  # every line once, in order, nothing cut
    assert f"Run {run_id} succeeded" in errors


def test_the_suites_runs_stay_in_its_own_project_and_a_wrong_one_is_named(repository):
    run_id = launch(repository, "broken")
    ours = metallo("run", "list", "--limit", "200", "--output", "json").json()
    assert run_id in [r["run_id"] for r in ours["runs"]]
    assert all(r["project"] == PROJECT for r in ours["runs"])
    demo = metallo("run", "list", "--project", "demo", "--limit", "200", "--output", "json")
    assert demo.code == 0, demo.stderr
    assert run_id not in [r["run_id"] for r in demo.json()["runs"]]
    unknown = metallo("run", "list", "--project", "no-such-project", "--output", "json")
    error = unknown.json()["error"]
    assert unknown.code == 3 and error["code"] == "project-not-found"
    assert "no-such-project" in error["message"] and "demo" not in error["message"]
    metallo("run", "wait", run_id, "--quiet", "--timeout", "300", timeout=360)


def test_a_missing_branch_points_at_the_branch_list_which_works(repository):
    refused = metallo("action", "run", repository, "broken", "--branch", "nob", "--output", "json")
    error = refused.json()["error"]
    assert refused.code == 3 and error["code"] == "branch-not-found"
    command = f"metallo repo branches {repository}"
    assert f"`{command}`" in error["hint"]
    # The suggested command answers against the lab Git server (its CA, its credential).
    listed = metallo(*command.split()[1:], "--output", "json")
    assert listed.code == 0, listed.stderr
    assert [b["name"] for b in listed.json()["branches"]] == ["main"]
    assert listed.json()["default_branch"] == "main"
    table = metallo(*command.split()[1:])
    assert table.code == 0 and "main" in table.stdout and "default" in table.stdout


def test_the_launch_and_its_cancellation_are_in_the_projects_audit(repository):
    from datetime import UTC, datetime, timedelta

    since = (datetime.now(UTC) - timedelta(seconds=30)).isoformat()
    run_id = launch(repository, "nap")
    cancelled = metallo("run", "cancel", run_id, "--reason", "audit e2e", "--wait",
                        "--timeout", "240", timeout=300)
    assert cancelled.code == 0, cancelled.stderr  # the cancellation was recorded and ended
    listed = metallo("audit", "list", "--since", since, "--actor", "m-alice", "--limit", "200",
                     "--output", "json")
    assert listed.code == 0, listed.stderr
    mine = [r for r in listed.json()["records"] if r["affected"].get("run_id") == run_id]
    assert [(r["service"], r["action"], r["decision"]) for r in mine] == [
        ("execution_core", "run.launch", "accepted"), ("execution_core", "run.cancel", "accepted")]
    assert mine[1]["summary"]["reason"] == "audit e2e" and mine[0]["project"] == PROJECT
