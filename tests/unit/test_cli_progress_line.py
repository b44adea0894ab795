"""The progress line of `--wait` / `run wait` (metallo.cli.progress.run_line)."""

from metallo.cli.progress import run_line
from metallo.execution_core.v1 import execution_core_pb2 as ec


def run(**fields) -> ec.Run:
    message = ec.Run(run_id="r-1", action="train", site_id="lab-slurm", **fields)
    message.attempts.add(number=1, state="running", native_state="PENDING")
    return message


def test_a_started_run_still_waiting_at_the_site_says_so():
    line = run_line(run(phase="running", observation_phase="queued", native_state="PENDING"))
    assert "phase running · observed queued" in line
    assert "native PENDING" in line


def test_the_observation_is_not_repeated_when_it_matches_the_phase():
    line = run_line(run(phase="running", observation_phase="running", native_state="RUNNING"))
    assert "observed" not in line
    assert line.startswith("run r-1 · action train · phase running · attempt 1 running")


def test_an_ended_run_shows_its_outcome_not_the_last_observation():
    line = run_line(run(phase="terminal", observation_phase="succeeded", outcome="succeeded"))
    assert "observed" not in line
    assert line.endswith("outcome succeeded")
