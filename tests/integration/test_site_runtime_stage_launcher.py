"""The local executor's stage launcher (ADR 0010): runners forked in their own session
with exactly the given environment, reaped, outliving the launcher, and a dead
launcher replaced — real processes, no services."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from site_runtime.adaptors.local_processes import StageLauncher, StageProcesses


def _compute_stage(tmp_path: Path, name: str, argv: list[str]) -> tuple[Path, Path]:
    control, repo = tmp_path / name / "control", tmp_path / name / "repo"
    control.mkdir(parents=True)
    repo.mkdir()
    log = tmp_path / name / "stage.log"
    spec = {
        "stage": "compute",
        "repo_dir": str(repo),
        "log_file": str(log),
        "steps": [argv],
        "environment": {"PATH": os.environ["PATH"], "ANSWER": "42"},
        "wall_time_seconds": 60,
        "grace_seconds": 1,
        "author": {"name": "Metallo", "email": "metallo@localhost"},
    }
    (control / "spec.json").write_text(json.dumps(spec))
    return control, log


def _wait(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def processes():
    p = StageProcesses()
    yield p
    p.close()


def test_a_forked_runner_runs_the_stage_in_its_own_session_and_is_reaped(tmp_path, processes):
    control, log = _compute_stage(tmp_path, "a", ["sh", "-c", 'echo "answer=$ANSWER"'])
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "METALLO_GIT_TOKEN": "s3cret-token"}
    pid, ticks = processes.spawn(control, env, tmp_path / "a" / "runner.log")
    assert ticks is not None  # read before the launcher could reap it
    _wait(lambda: (control / "status.json").exists())
    status = json.loads((control / "status.json").read_text())
    assert status["stage"] == "compute" and status["exit_code"] == 0 and status["code"] is None
    assert "answer=42" in log.read_text()
    claim_pid = int((control / "claim").read_text().split()[0])
    assert claim_pid == pid
    # The launcher reaps it: no zombie left behind (at most REAP_SECONDS later).
    _wait(lambda: not Path(f"/proc/{pid}").exists(), timeout=5)
    assert not processes.alive(pid, ticks)


def test_the_token_reaches_the_runner_environment_only(tmp_path, processes):
    control, _ = _compute_stage(tmp_path, "b", ["sleep", "30"])
    env = {"PATH": os.environ["PATH"], "METALLO_GIT_TOKEN": "s3cret-token"}
    pid, ticks = processes.spawn(control, env, tmp_path / "b" / "runner.log")
    try:
        _wait(lambda: (control / "child").exists())
        assert os.getsid(pid) == pid  # a new session: it outlives the Runtime's group
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"s3cret" not in cmdline
        step = int((control / "child").read_text())
        # The runner pops the credentials: compute's step gets only the spec's environment.
        step_env = Path(f"/proc/{step}/environ").read_bytes().split(b"\0")
        assert b"ANSWER=42" in step_env and not any(b"s3cret" in e for e in step_env)
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert b"s3cret" not in path.read_bytes(), path
    finally:
        os.kill(pid, signal.SIGTERM)
    _wait(lambda: (control / "status.json").exists())
    assert json.loads((control / "status.json").read_text())["code"] == "cancelled"


def test_runners_outlive_the_launcher_and_a_dead_launcher_is_replaced(tmp_path):
    launcher = StageLauncher()
    control, _ = _compute_stage(tmp_path, "c", ["sleep", "30"])
    pid, ticks = launcher.spawn(control, {"PATH": os.environ["PATH"]}, tmp_path / "c.log")
    first = launcher._process
    assert first is not None
    launcher.close()  # as when the Runtime stops: EOF, the launcher ends
    assert first.poll() is not None
    processes = StageProcesses()
    try:
        assert processes.alive(pid, ticks), "the runner must outlive its launcher"
        # A launcher killed behind the Runtime's back is replaced on the next spawn.
        control2, _ = _compute_stage(tmp_path, "d", ["true"])
        processes.spawn(control2, {"PATH": os.environ["PATH"]}, tmp_path / "d.log")
        os.kill(processes._launcher._process.pid, signal.SIGKILL)
        processes._launcher._process.wait()
        control3, _ = _compute_stage(tmp_path, "e", ["true"])
        pid3, _ = processes.spawn(control3, {"PATH": os.environ["PATH"]}, tmp_path / "e.log")
        _wait(lambda: (control3 / "status.json").exists())
        assert int((control3 / "claim").read_text().split()[0]) == pid3
    finally:
        processes.close()
        os.kill(pid, signal.SIGTERM)
    _wait(lambda: (control / "status.json").exists())


def test_a_runner_that_cannot_start_says_so_in_its_log(tmp_path, processes):
    # The control directory is missing: the child fails before the runner; the
    # traceback lands in the runner log, not in the launcher's reply pipe.
    log = tmp_path / "f.log"
    pid, _ = processes.spawn(tmp_path / "missing", {"PATH": os.environ["PATH"]}, log)
    _wait(lambda: "FileNotFoundError" in (log.read_text() if log.exists() else ""))
    control, _ = _compute_stage(tmp_path, "g", ["true"])
    processes.spawn(control, {"PATH": os.environ["PATH"]}, tmp_path / "g.log")
    _wait(lambda: (control / "status.json").exists())  # the launcher still answers
