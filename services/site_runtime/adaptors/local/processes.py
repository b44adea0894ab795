"""Stage processes of the local executor: start a stage runner, find it again after a
Runtime restart, tell whether it is alive, read what it recorded, stop it.

Runners are forked by one long-lived stage launcher (``stage_launcher.py``) rather
than started as new interpreters: a fork costs about 1 ms of CPU, a fresh
``python -I -S stage_runner.py`` about 80 ms (the launch benchmark; ADR 0010).

A runner (``stage_runner.py``) leaves in its control directory: ``claim``
(``"<pid> <start ticks>"``, written exclusively when it takes the stage), ``child``
(the process group of the step it runs) and ``status.json`` (its outcome). A pid is
trusted only together with its start time (``/proc/<pid>/stat``), so a recycled pid
is never mistaken for the runner.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from site_runtime.adaptors.local import stage_launcher, stage_runner
from site_runtime.adaptors.local.stage_runner import process_start_ticks

log = logging.getLogger("site_runtime.local")

# Runner and launcher use the standard library only, so they start isolated (-I) and
# without site-packages (-S): the environment's site hooks, such as an editable
# install's finder, are skipped.
RUNNER_ARGV = [sys.executable, "-I", "-S", str(Path(stage_runner.__file__).resolve())]
LAUNCHER_ARGV = [sys.executable, "-I", "-S", str(Path(stage_launcher.__file__).resolve())]
LAUNCH_REPLY_SECONDS = 10.0


class StageLauncher:
    """The Runtime's end of the stage launcher (``stage_launcher.py``): started on first
    use, restarted when it died or stopped answering; closing it ends the launcher,
    never its runners. Thread-safe (one request at a time)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._next_id = 0

    def _started(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                LAUNCHER_ARGV,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C to the Runtime's group must not reach it
                close_fds=True,
                bufsize=0,
            )
        return self._process

    def spawn(self, control: Path, env: dict[str, str], log_file: Path) -> tuple[int, int | None]:
        """Fork a runner for ``control`` (see :meth:`StageProcesses.spawn`); returns
        ``(pid, start ticks)``. A launcher that died, stopped answering within
        ``LAUNCH_REPLY_SECONDS`` or answered out of protocol is killed and replaced, and
        the request sent once more (a runner it may have forked meanwhile finds the
        stage claimed and exits without effect). Raises OSError when no launcher answers
        or the launcher could not fork."""
        with self._lock:
            failure: Exception | None = None
            for _ in range(2):
                self._next_id += 1
                request_id = self._next_id
                request = {
                    "id": request_id,
                    "control": str(control),
                    "log_file": str(log_file),
                    "env": env,
                }
                process = self._started()
                try:
                    reply = _exchange(process, request)
                    if reply.get("id") != request_id:
                        raise EOFError("the stage launcher answered another request")
                    if "error" in reply:
                        raise LaunchRefused(str(reply["error"]))
                    pid, ticks = int(reply["pid"]), reply.get("ticks")
                    if pid <= 0 or not (ticks is None or isinstance(ticks, int)):
                        raise ValueError("a reply out of protocol")
                except LaunchRefused as refused:
                    raise OSError(
                        f"the stage launcher could not start a runner: {refused}"
                    ) from None
                except (OSError, ValueError, KeyError, TypeError, EOFError) as error:
                    failure = error
                    log.warning(
                        "stage launcher out of protocol (%s); replacing it", type(error).__name__
                    )
                    self._kill()
                    continue
                return pid, ticks
            raise OSError(
                f"the stage launcher does not answer ({type(failure).__name__}: {failure})"
            )

    def reap(self) -> None:
        """Collect a launcher that ended on its own (no zombie left) and say so; the next
        spawn starts a new one."""
        with self._lock:
            process = self._process
            if process is None or process.poll() is None:
                return
            log.warning(
                "the stage launcher ended (exit status %s); the next stage starts a new one",
                process.returncode,
            )
            self._process = None
            _close_pipes(process)

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            _close_pipes(process)

    def close(self) -> None:
        """End the launcher (EOF on its stdin; KILL after 5 s); runners keep running."""
        with self._lock:
            process, self._process = self._process, None
            if process is None:
                return
            _close_pipes(process)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class LaunchRefused(Exception):
    """The launcher answered with an error (it could not fork)."""


def _exchange(process: subprocess.Popen, request: dict[str, Any]) -> dict[str, Any]:
    """Write one request line and read one reply line within ``LAUNCH_REPLY_SECONDS``.
    Raises OSError/EOFError/TimeoutError/ValueError for a launcher out of protocol."""
    stdin, stdout = process.stdin, process.stdout
    if stdin is None or stdout is None:
        raise EOFError("the stage launcher has no pipes")
    data = json.dumps(request).encode() + b"\n"
    while data:
        data = data[os.write(stdin.fileno(), data) :]
    deadline = time.monotonic() + LAUNCH_REPLY_SECONDS
    reply = b""
    while not reply.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no reply within {LAUNCH_REPLY_SECONDS:.0f} s")
        readable, _, _ = select.select([stdout], [], [], remaining)
        if readable:
            chunk = os.read(stdout.fileno(), 4096)
            if not chunk:
                raise EOFError("the stage launcher ended")
            reply += chunk
            if len(reply) > 65536:
                raise ValueError("a reply out of protocol")
    answer = json.loads(reply)
    if not isinstance(answer, dict):
        raise ValueError("a reply out of protocol")
    return answer


def _close_pipes(process: subprocess.Popen) -> None:
    for stream in (process.stdin, process.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


class StageProcesses:
    """Start runners through the stage launcher; /proc lookups (pid + start time) for
    every runner, whether this Runtime started it or adopted it after a restart."""

    def __init__(self) -> None:
        self._launcher = StageLauncher()

    def spawn(self, control: Path, env: dict[str, str], log_file: Path) -> tuple[int, int | None]:
        """Start a runner for ``control`` in a new session (it must outlive the Runtime)
        with exactly ``env`` (credentials included: they pass through a pipe, never argv
        or a file); its own output goes to ``log_file``. Returns ``(pid, start ticks)``.
        Synchronous on purpose: the pid is journaled before anything else happens.
        Raises OSError when the runner cannot be started."""
        return self._launcher.spawn(control, env, log_file)

    def close(self) -> None:
        """Stop the launcher; running runners are left running (they are adopted)."""
        self._launcher.close()

    def reap(self) -> None:
        """Collect and report a launcher that died (see :meth:`StageLauncher.reap`)."""
        self._launcher.reap()

    def alive(self, pid: int | None, ticks: int | None) -> bool:
        """True when ``pid`` is a live process with start time ``ticks`` (when known)."""
        if pid is None:
            return False
        current = process_start_ticks(pid)
        return current is not None and (ticks is None or current == ticks)

    @staticmethod
    def claim(control: Path) -> tuple[int, int | None] | None:
        """``(pid, start ticks)`` of the runner that claimed the stage, or None."""
        try:
            pid, ticks = (control / "claim").read_text().split()
            return int(pid), (None if ticks == "None" else int(ticks))
        except (OSError, ValueError):
            return None

    @staticmethod
    def status(control: Path) -> dict[str, Any] | None:
        """The runner's recorded outcome, or None while it has none."""
        try:
            return json.loads((control / "status.json").read_text())
        except (OSError, ValueError):
            return None

    def terminate(self, pid: int | None, ticks: int | None) -> None:
        """Ask the runner to stop (SIGTERM: it stops its step's group, TERM then KILL)."""
        if pid is not None and self.alive(pid, ticks):
            os.kill(pid, signal.SIGTERM)

    def kill_orphaned_step(self, control: Path, runner_pid: int) -> bool:
        """SIGKILL the process group of the step a lost runner left behind; True when
        one was signalled. Only a group with a live member in the runner's session
        (the runner called ``setsid``; its steps keep that session) is signalled, so
        a recycled process-group id is never mistaken for the step."""
        group = _read_int(control / "child")
        if not group or not live_group_members(group, session=runner_pid):
            return False
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def kill(self, control: Path, pid: int | None) -> None:
        """SIGKILL the step's process group and the runner's own group."""
        for group in (_read_int(control / "child"), pid):
            if group:
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def live_group_members(group: int, session: int | None = None) -> list[int]:
    """Pids of live (non-zombie) processes in process group ``group`` — only those in
    session ``session`` when given (``/proc/<pid>/stat``)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if fields[0] in ("Z", "X") or int(fields[2]) != group:
            continue
        if session is None or int(fields[3]) == session:
            members.append(int(entry.name))
    return members


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
