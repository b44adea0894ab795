"""One stage of a local Attempt, as its own process (the local executor's "job").

``python -I -S …/stage_runner.py CONTROL_DIR`` — started by the local executor in a
new session, so it outlives a Runtime restart and can be re-adopted by pid + start
time. It imports the standard library only (and its sibling ``stage_git.py``, git in
the checkout): it runs without site-packages. It:

1. claims ``CONTROL_DIR/claim`` exclusively (``O_EXCL``; holds ``"<pid> <start>"``):
   a second runner for the same stage exits at once without any effect, so a
   relaunch during recovery can never run a stage twice;
2. runs the stage from ``CONTROL_DIR/spec.json`` (no secrets in it):
   - ``stage-in``: fetch the repository, check out the exact pinned commit on the
     Run's branch (``repository-commit-missing`` when the remote does not have it),
     ``git lfs pull`` when git-lfs is installed and the checkout tracks LFS files;
   - ``compute``: the pre-commands and the command, each with its exact argv (or
     ``/bin/sh -c`` only for an explicit shell step), in its own process group, with
     the spec's environment; wall time enforced with TERM then KILL after a grace;
   - ``stage-out``: commit every change with a fixed author and push ``HEAD`` to
     the Run's branch (LFS objects first when there are any);
3. writes ``CONTROL_DIR/status.json`` atomically: stage, exit_code, signal, code,
   output_commit, finished_at. SIGTERM (cancellation) stops the running step the
   same way (TERM, grace, KILL) and records code ``cancelled``;
4. sends one empty datagram to the spec's ``wake_socket`` (when set) so the Runtime
   advances the Attempt now instead of at its next poll (a hint only: lost or
   unanswered, the poll still finds ``status.json``; ADR 0012).

Repository credentials arrive only in this process's environment
(``METALLO_GIT_USERNAME``/``METALLO_GIT_TOKEN``); git's environment carries them as
a Basic header for the repository's URL (``GIT_CONFIG_*``, sent with the first
request) and an askpass helper that contains no secret reads them if the server asks
again. They never reach argv, a file or compute.
Output of every step is appended to the Attempt-scoped stage log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__:  # imported as part of the Runtime
    from site_runtime.adaptors.local.stage_git import CheckoutGit
else:  # run as a script with -I -S: the standard library and this directory only
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from stage_git import CheckoutGit  # type: ignore[no-redef]

POLL_SECONDS = 0.1


def process_start_ticks(pid: int, *, zombies: bool = False) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22),
    or None when there is no such live process — a zombie counts only with ``zombies``
    (for its parent, whose unreaped child's pid cannot have been reused)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    if not fields or (fields[0] in ("Z", "X") and not zombies):
        return None
    return int(fields[19])


class Stopped(Exception):
    """The step was stopped: ``code`` is ``cancelled`` or ``wall-time-exceeded``."""

    def __init__(self, code: str, returncode: int | None) -> None:
        super().__init__(code)
        self.code = code
        self.returncode = returncode


class Runner:
    """Runs the stage described by ``CONTROL_DIR/spec.json`` (see module doc)."""

    def __init__(self, control: Path, spec: dict[str, Any], credentials: dict[str, str]) -> None:
        self.control = control
        self.spec = spec
        self.credentials = credentials
        self.log = open(spec["log_file"], "ab", buffering=0)  # noqa: SIM115 - lives with the process
        self.cancelled = False
        self.deadline: float | None = None
        self.grace = float(spec.get("grace_seconds", 10))
        self.repo = CheckoutGit(self, control, spec, credentials)

    # -------------------------------------------------------------- processes
    def note(self, text: str) -> None:
        """Append ``[metallo <UTC time>] text`` to the Attempt's stage log."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.log.write(f"[metallo {stamp}] {text}\n".encode())

    def run_step(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], capture: bool = False
    ) -> tuple[int, str]:
        """Run one process in its own group; return (returncode, captured stdout).
        Raises :class:`Stopped` on cancellation or wall time."""
        if self.cancelled:
            raise Stopped("cancelled", None)
        child = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture else self.log,
            stderr=self.log,
            process_group=0,
            close_fds=True,
        )
        (self.control / "child").write_text(str(child.pid))
        out = b""
        while True:
            try:
                if capture:
                    data, _ = child.communicate(timeout=POLL_SECONDS)
                    out += data or b""
                else:
                    child.wait(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                pass
            reason = self.stop_reason()
            if reason:
                self.note(f"stopping the step: {reason}")
                self.stop_group(child)
                raise Stopped(reason, child.returncode)
        return child.returncode, out.decode(errors="replace")

    def stop_group(self, child: subprocess.Popen) -> None:
        """TERM the step's process group, then KILL it after the grace period."""
        for sig, wait in ((signal.SIGTERM, self.grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(child.pid, sig)
            except ProcessLookupError:
                pass
            try:
                child.wait(timeout=wait)
                # The leader is gone; KILL what is left of its group all the same.
                if sig == signal.SIGTERM:
                    try:
                        os.killpg(child.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                return
            except subprocess.TimeoutExpired:
                continue

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, raising :class:`Stopped` at once on cancellation or when
        the stage's time limit passes."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            reason = self.stop_reason()
            if reason:
                raise Stopped(reason, None)
            time.sleep(min(POLL_SECONDS, left))

    def stop_reason(self) -> str | None:
        """``cancelled`` or ``wall-time-exceeded`` once the stage must stop, else None."""
        if self.cancelled:
            return "cancelled"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "wall-time-exceeded"
        return None

    def stage_in(self) -> dict[str, Any]:
        """Fetch the repository and check out the pinned commit on the Run's branch.

        Returns the stage outcome: ``{"exit_code": 0}`` or an ``exit_code`` with code
        ``stage-in-failed`` or ``repository-commit-missing`` (a Run's inputs are pinned to one commit).
        """
        repo = Path(self.spec["repo_dir"])
        info = self.spec["repository"]
        repo.mkdir(mode=0o700, exist_ok=True)
        if (repo / ".git").exists():
            # A rerun after a restart: the remote may point elsewhere; set it afresh.
            self.repo.git("remote", "remove", "origin")
        else:
            rc, _ = self.repo.git("init", "-q", f"--template={self.repo.checkout_template()}")
            if rc != 0:
                return {"exit_code": rc, "code": "stage-in-failed"}
        self.repo.git("remote", "add", "origin", info["url"])
        commit = info["commit"]
        # The exact saved commit first: a protocol v2 server hands out any object it
        # has, and asking for one object skips the ref listing (one HTTP request and
        # one upload-pack fewer per Run). An older server refuses unadvertised objects:
        # then every branch is fetched, as a commit on no branch still fails below.
        # The commit becomes origin/<branch>: `git lfs push` at stage-out uploads only
        # what no remote-tracking ref reaches (without one it walked the whole history
        # and failed on the earlier LFS versions that stage-in never pulled).
        rc, _ = self.repo.git(
            "fetch", "-q", "--no-tags", "origin", f"+{commit}:refs/remotes/origin/{info['branch']}"
        )
        if rc != 0:
            rc, _ = self.repo.git(
                "fetch", "-q", "--no-tags", "origin", "+refs/heads/*:refs/remotes/origin/*"
            )
            if rc != 0:
                self.note("fetching the repository failed")
                return {"exit_code": rc, "code": "stage-in-failed"}
            if self.repo.git("cat-file", "-e", f"{commit}^{{commit}}")[0] != 0:
                self.note(f"the repository does not have commit {commit}")
                return {"exit_code": 1, "code": "repository-commit-missing"}
        # An attached branch at the exact saved commit: moving the remote branch later
        # cannot change the input, and stage-out pushes from it.
        rc, _ = self.repo.git("checkout", "-q", "-B", info["branch"], commit)
        if rc != 0:
            return {"exit_code": rc, "code": "stage-in-failed"}
        if self.repo.lfs_files():
            rc, _ = self.repo.git("lfs", "pull", "origin")
            if rc != 0:
                return {"exit_code": rc, "code": "stage-in-failed"}
        self.note(f"checked out {commit} on {info['branch']}")
        return {"exit_code": 0}

    def compute(self) -> dict[str, Any]:
        """Run each step argv in the working directory with the spec's environment.

        Returns ``{"exit_code": 0}``, or the failing step's exit code or signal with code
        ``compute-failed``; raises :class:`Stopped` on cancellation or wall time.
        """
        repo = Path(self.spec["repo_dir"])
        cwd = (repo / self.spec.get("working_directory", ".")).resolve()
        if not cwd.is_relative_to(repo.resolve()) or not cwd.is_dir():
            self.note("the working directory is not a directory inside the checkout")
            return {"exit_code": 1, "code": "compute-failed"}
        env = dict(self.spec["environment"])
        for argv in self.spec["steps"]:
            self.note(f"running step {argv[0]!r} ({len(argv)} arguments)")
            rc, _ = self.run_step(argv, cwd=cwd, env=env)
            if rc != 0:
                return _exit(rc, "compute-failed")
        return {"exit_code": 0}

    def stage_out(self) -> dict[str, Any]:
        """Commit every change and push ``HEAD`` to the Run's branch (LFS objects first).

        Returns ``exit_code`` and ``output_commit`` (None when nothing changed), or code
        ``stage-out-failed``; raises :class:`Stopped` on cancellation or wall time.
        """
        info = self.spec["repository"]
        # A clean status is the common case (actions that only report): one process.
        # A listed entry may still stage nothing new (a dirty submodule, a file added
        # then deleted, …), so the staged diff decides after ``add -A``.
        rc, changes = self.repo.git("status", "--porcelain", "-z", "--untracked-files=all", capture=True)
        if rc != 0:
            return {"exit_code": 1, "code": "stage-out-failed"}
        if changes.strip("\0"):
            if self.repo.git("add", "-A")[0] != 0:
                return {"exit_code": 1, "code": "stage-out-failed"}
            changed = self.repo.git("diff", "--cached", "--quiet")[0] != 0
        else:
            changed = False
        if not changed and self.repo.head_commit() == info["commit"]:
            self.note("no changes to commit; nothing pushed")
            return {"exit_code": 0, "output_commit": None}
        if changed:  # else compute committed its outputs itself: push those
            rc, _ = self.repo.git("commit", "-q", "--no-verify", "-m", self.spec["message"])
            if rc != 0:
                return _exit(rc, "stage-out-failed")
        if self.repo.lfs_files():
            rc = self.repo.git_retried("lfs", "push", "origin", info["branch"])
            if rc != 0:
                return _exit(rc, "stage-out-failed")
        rc, own = self.repo.push_onto_branch(info["branch"], info["commit"])
        if rc != 0:
            return _exit(rc, "stage-out-failed")
        if not own:
            return {"exit_code": 0, "output_commit": None}
        rc, head = self.repo.git("rev-parse", "HEAD", capture=True)
        self.note(f"pushed {head.strip()} to {info['branch']}")
        return {"exit_code": 0, "output_commit": head.strip() if rc == 0 else None}

    def run(self) -> dict[str, Any]:
        """Run the spec's stage within ``wall_time_seconds`` and return its outcome dict.

        Keys: ``exit_code``, ``signal`` and ``code`` (``cancelled``, ``wall-time-exceeded``,
        ``<stage>-failed``...) and, for stage-out, ``output_commit``. :class:`Stopped` and
        ``OSError`` become outcomes (the latter with exit code 127), never exceptions.
        """
        stage = self.spec["stage"]
        self.note(f"{stage} started (pid {os.getpid()})")
        # compute: the action's wallTimeSeconds; staging: the Runtime's staging limit.
        self.deadline = time.monotonic() + int(self.spec["wall_time_seconds"])
        try:
            if stage == "stage-in":
                outcome = self.stage_in()
            elif stage == "compute":
                outcome = self.compute()
            else:
                outcome = self.stage_out()
        except Stopped as stopped:
            outcome = _exit(
                stopped.returncode if stopped.returncode is not None else -15, stopped.code
            )
        except OSError as error:
            self.note(f"{stage} could not run a step ({type(error).__name__})")
            outcome = {
                "exit_code": 127,
                "code": f"{stage}-failed" if stage != "compute" else "compute-failed",
            }
        self.note(
            f"{stage} finished: exit_code={outcome.get('exit_code')} "
            f"signal={outcome.get('signal')} code={outcome.get('code')}"
        )
        return outcome


def _exit(returncode: int, code: str) -> dict[str, Any]:
    if returncode < 0:
        return {"exit_code": None, "signal": -returncode, "code": code}
    return {"exit_code": returncode, "signal": None, "code": code}


def write_status(control: Path, status: dict[str, Any]) -> None:
    """Write ``status.json`` atomically and durably (temp file, fsync, rename)."""
    tmp = control / "status.json.tmp"
    with open(tmp, "w") as f:
        json.dump(status, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, control / "status.json")
    dir_fd = os.open(control, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def notify_runtime(wake_socket: str | None) -> bool:
    """Send one empty datagram to the Runtime's wake socket (ADR 0012); never raises.

    Returns whether it was sent. The datagram carries nothing: the Runtime reads the
    outcome from ``status.json``, so a forged or lost wake changes no state.
    """
    if not wake_socket:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(b"", wake_socket)
    except OSError:  # no Runtime listening (restarting) or its queue full: it polls
        return False
    return True


def main(argv: list[str]) -> int:
    """Entry point; returns 0 whether the stage succeeded or failed (the status file
    carries the outcome) and 2 when the control directory is unusable."""
    if len(argv) != 1:
        print("usage: python -m site_runtime.adaptors.local.stage_runner CONTROL_DIR", file=sys.stderr)
        return 2
    control = Path(argv[0])
    credentials = {
        k: os.environ.pop(k)
        for k in ("METALLO_GIT_USERNAME", "METALLO_GIT_TOKEN")
        if k in os.environ
    }
    try:
        fd = os.open(control / "claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return 0  # another runner owns this stage: no second effect
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()} {process_start_ticks(os.getpid())}")
        f.flush()
        os.fsync(f.fileno())
    spec = json.loads((control / "spec.json").read_text())
    runner = Runner(control, spec, credentials)

    def on_term(signum, frame) -> None:  # cancellation from the Runtime
        runner.cancelled = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if (control / "cancel").exists():
        runner.cancelled = True
    outcome = runner.run() if not runner.cancelled else {"exit_code": None, "code": "cancelled"}
    write_status(
        control,
        {
            "stage": spec["stage"],
            "exit_code": outcome.get("exit_code"),
            "signal": outcome.get("signal"),
            "code": outcome.get("code"),
            "output_commit": outcome.get("output_commit"),
            "finished_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    )
    notify_runtime(spec.get("wake_socket"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
