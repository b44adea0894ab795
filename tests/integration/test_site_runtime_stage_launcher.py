"""The local executor's stage launcher (ADR 0010): runners forked in their own session
with exactly the given environment, reaped, outliving the launcher, and a dead
launcher replaced — real processes, no services."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from site_runtime.adaptors.local import processes as local_processes
from site_runtime.adaptors.local.processes import StageLauncher, StageProcesses

DEBIAN_PYTHON = "/usr/bin/python3"
NOBODY = 65534


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


def _fake_launcher(tmp_path: Path, monkeypatch, body: str) -> None:
    script = tmp_path / "fake_launcher.py"
    script.write_text("import sys, json, time\n" + body)
    monkeypatch.setattr(local_processes, "LAUNCHER_ARGV", [sys.executable, str(script)])


@pytest.mark.parametrize(
    "body",
    [
        "time.sleep(60)\n",  # never answers
        'sys.stdin.readline(); sys.stdout.write(\'{"id": 1, "pid"\'); sys.stdout.flush(); time.sleep(60)\n',
        "sys.stdin.readline(); print('{}', flush=True); time.sleep(60)\n",
        "sys.stdin.readline(); print(json.dumps({'id': 99, 'pid': 1, 'ticks': 1}), flush=True); time.sleep(60)\n",
        "sys.stdin.readline(); print(json.dumps({'id': 1, 'pid': 'x'}), flush=True); time.sleep(60)\n",
    ],
    ids=["silent", "partial-line", "empty", "another-id", "bad-pid"],
)
def test_a_launcher_out_of_protocol_is_killed_and_spawn_fails_with_oserror(
    tmp_path, monkeypatch, body
):
    _fake_launcher(tmp_path, monkeypatch, body)
    monkeypatch.setattr(local_processes, "LAUNCH_REPLY_SECONDS", 0.5)
    launcher = StageLauncher()
    began = time.monotonic()
    with pytest.raises(OSError, match="does not answer"):
        launcher.spawn(tmp_path, {"PATH": os.environ["PATH"]}, tmp_path / "x.log")
    assert time.monotonic() - began < 5  # two bounded tries, no unbounded read
    assert launcher._process is None  # killed, not left behind
    launcher.close()


def test_spawns_from_several_threads_each_get_their_own_runner(tmp_path, processes):
    controls = [_compute_stage(tmp_path, f"t{n}", ["true"])[0] for n in range(12)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        pids = list(
            pool.map(
                lambda c: processes.spawn(c, {"PATH": os.environ["PATH"]}, c.parent / "r.log")[0],
                controls,
            )
        )
    for control, pid in zip(controls, pids, strict=True):
        _wait(lambda control=control: (control / "status.json").exists())
        assert int((control / "claim").read_text().split()[0]) == pid


_PIPE_PROBE = """
import json, subprocess, sys, time
plain = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE)
launcher = subprocess.Popen([sys.executable, *sys.argv[1:]], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
time.sleep(1.0)  # the launcher hardens itself first thing
result = {"alive": launcher.poll() is None}
for name, p in (("plain", plain), ("launcher", launcher)):
    # Another process of the same user, as a compute step would be.
    out = subprocess.run([sys.executable, "-c", PROBE, str(p.pid)], capture_output=True, text=True)
    result[name] = out.stdout.strip()
    p.kill()
    p.wait()
print(json.dumps(result))
"""

_OPEN_FD0 = (
    "import os, sys\n"
    "try:\n"
    "    os.close(os.open(f'/proc/{sys.argv[1]}/fd/0', os.O_RDONLY | os.O_NONBLOCK))\n"
    "    print('opened')\n"
    "except PermissionError:\n"
    "    print('denied')\n"
)


def test_another_process_of_the_same_user_cannot_open_the_launchers_pipes():
    # A compute step runs as the Runtime's user: it must not reach the request pipe,
    # which carries other Attempts' repository tokens. All of it runs as an
    # unprivileged user (root may open any process's fds), with Debian's python
    # (root's pyenv is private): a plain process's pipe opens, the launcher's does not.
    assert Path(DEBIAN_PYTHON).exists()
    driver = _PIPE_PROBE.replace("PROBE", repr(_OPEN_FD0))
    done = subprocess.run(
        [DEBIAN_PYTHON, "-I", "-S", "-c", driver, *local_processes.LAUNCHER_ARGV[1:]],
        user=NOBODY,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"alive": True, "plain": "opened", "launcher": "denied"}


def test_a_launcher_that_died_is_reaped_and_reported(tmp_path, processes, caplog):
    control, _ = _compute_stage(tmp_path, "h", ["true"])
    processes.spawn(control, {"PATH": os.environ["PATH"]}, tmp_path / "h.log")
    launcher = processes._launcher._process
    os.kill(launcher.pid, signal.SIGKILL)
    _wait(lambda: Path(f"/proc/{launcher.pid}/stat").read_text().split(") ")[1][0] == "Z")
    caplog.set_level("WARNING", logger="site_runtime.local")
    processes.reap()
    assert not Path(f"/proc/{launcher.pid}").exists()  # no zombie left under the Runtime
    assert "the stage launcher ended" in caplog.text
