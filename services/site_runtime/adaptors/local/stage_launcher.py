"""The local executor's stage launcher: one long-lived process that forks stage runners.

``python -I -S …/stage_launcher.py`` — started by the Runtime in its own session with
pipes on stdin and stdout. It imports :mod:`stage_runner` (standard library only) once;
each stage then costs a ``fork`` (about 1 ms of CPU) instead of a new interpreter that
imports ``json``, ``subprocess`` and the runner again (about 80 ms of CPU on the lab
machine, three per Attempt — the largest single cost of a trivial Run).

Protocol, one JSON object per line (the Runtime is the only writer):

- request ``{"id": N, "control": DIR, "log_file": PATH, "env": {NAME: VALUE}}`` — the
  runner's environment, repository credentials included: they travel through the
  pipe, never through argv or a file;
- reply ``{"id": N, "pid": PID, "ticks": START_TICKS}`` or ``{"id": N, "error": TEXT}``
  (no secret in it); the Runtime takes only the reply with its request's id.

The launcher makes itself non-dumpable (``PR_SET_DUMPABLE`` 0, inherited by the
runners it forks, reset by ``execve`` for their steps), so no other process of the
same user — a compute step included — can open its pipes or read its memory through
``/proc`` and pick up another Attempt's credentials. Runners are named
``stage-runner`` (``/proc/<pid>/comm``) so they can be told from the launcher.

Each forked runner starts a new session (it must outlive the Runtime and this
launcher), has stdin on ``/dev/null`` and stdout/stderr appended to ``log_file``, and
runs what ``python -I -S stage_runner.py DIR`` runs (the same code, signal
dispositions and file descriptors). The launcher reaps its
finished runners after each request and at least once a second (a zombie for that
second reads as not alive to the Runtime, which is right), and reads each child's
start time before it can be reaped, so the pid it reports is never ambiguous. On EOF
(the Runtime stopped) the launcher exits; running runners are left running, as a
Runtime restart requires (docs/site-runtime.md, Recovery: they are adopted by their claim).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's dir out

import stage_runner  # noqa: E402 - after the path above

MAX_REQUEST_BYTES = 1 << 20
REAP_SECONDS = 1.0
_PR_SET_NAME, _PR_SET_DUMPABLE = 15, 4


try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _prctl(option: int, value: int | bytes) -> bool:
    """``prctl(option, value)`` through libc; False where it is not available."""
    try:
        return _LIBC is not None and _LIBC.prctl(option, value, 0, 0, 0) == 0
    except AttributeError:
        return False


def _child(request: dict) -> None:
    """In the forked child: become the runner for ``request['control']``; never returns."""
    code = 1
    try:
        _prctl(_PR_SET_NAME, b"stage-runner")
        os.setsid()
        stdin = os.open(os.devnull, os.O_RDONLY)
        out = os.open(str(request["log_file"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(stdin, 0)
        os.dup2(out, 1)  # from here on nothing of this child can reach the Runtime's pipe
        os.dup2(out, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        control = str(request["control"])
        os.chdir(control)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        code = stage_runner.main([control])
    except BaseException:  # noqa: BLE001 - the child must never return into the launcher loop
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def _reply(message: dict) -> None:
    os.write(1, json.dumps(message).encode() + b"\n")


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve() -> int:
    """Answer requests from stdin until EOF; return 0 (2 for an oversized request).
    See the module doc."""
    _prctl(_PR_SET_DUMPABLE, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    buffer = b""
    while True:
        while b"\n" not in buffer:
            readable, _, _ = select.select([0], [], [], REAP_SECONDS)
            _reap()
            if not readable:
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return 0
            buffer += chunk
            if len(buffer) > MAX_REQUEST_BYTES:
                _reply({"error": "request too large"})
                return 2
        line, buffer = buffer.split(b"\n", 1)
        request_id = None
        try:
            request = json.loads(line)
            if not isinstance(request, dict) or not isinstance(request.get("env"), dict):
                raise ValueError("a request needs id, control, log_file and env")
            request_id = request.get("id")
            pid = os.fork()
        except (ValueError, OSError) as error:
            _reply({"id": request_id, "error": f"{type(error).__name__}: {error}"})
            continue
        if pid == 0:
            _child(request)
        # Read before this loop can reap the child, so the pid it names is never ambiguous.
        _reply(
            {
                "id": request_id,
                "pid": pid,
                "ticks": stage_runner.process_start_ticks(pid, zombies=True),
            }
        )


if __name__ == "__main__":
    sys.exit(serve())
