"""One stage of a local Attempt, as its own process (the local executor's "job").

``python -I -S …/stage_runner.py CONTROL_DIR`` — started by the local executor in a
new session, so it outlives a Runtime restart and can be re-adopted by pid + start
time. It imports the standard library only: it runs without site-packages. It:

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

import base64
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$METALLO_GIT_USERNAME" ;;
  *) printf '%s\\n' "$METALLO_GIT_TOKEN" ;;
esac
"""
POLL_SECONDS = 0.1
#: Waits (seconds) before each new try of a failed push: a Git server restarting or
#: briefly unreachable must not throw away a finished compute's results.
PUSH_RETRY_SECONDS = (2.0, 5.0, 10.0, 20.0, 40.0)
#: What git prints for a push refused for good: trying again cannot help.
PERMANENT_PUSH_FAILURES = (
    "[rejected]", "[remote rejected]", "non-fast-forward", "The requested URL returned error: 403",
    "Authentication failed", "Permission denied",
)
#: Rounds of fetch, rebase and push again when the branch moved on meanwhile, and the
#: random pause (seconds) before each: Runs racing for one branch fall out of step.
REBASE_ROUNDS = 10
REBASE_PAUSE_SECONDS = (0.2, 2.0)


def moved_on(said: str) -> bool:
    """Whether git's push output says the branch moved on, which a rebase can cure: a
    rejected non-fast-forward update (another push came first), or another push busy
    with the ref on the server (``[remote rejected]`` … ``cannot lock ref``: it won the
    race between the server's advertisement and its update — ``but expected`` — or
    still holds the lock — ``….lock': File exists``, git waits only 100 ms for it)."""
    rejected = "[rejected]" in said and ("fetch first" in said or "non-fast-forward" in said)
    return rejected or ("[remote rejected]" in said and "cannot lock ref" in said)


#: The checkout's ``.git/config`` before ``git init`` adds its core settings, through
#: ``git init --template`` (one process). Constant text, never a user value. The LFS
#: filters are what ``git lfs install --local --skip-repo`` writes (that command
#: starts git-lfs, which starts a dozen git processes); no automatic maintenance after
#: a fetch (a scratch checkout gains nothing from ``git maintenance run --auto``).
CHECKOUT_CONFIG = """[gc]
\tauto = 0
[maintenance]
\tauto = false
"""
LFS_CONFIG = """[filter "lfs"]
\tclean = git-lfs clean -- %f
\tsmudge = git-lfs smudge -- %f
\tprocess = git-lfs filter-process
\trequired = true
[lfs]
\trepositoryformatversion = 0
"""


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
            if capture:
                try:
                    data, _ = child.communicate(timeout=POLL_SECONDS)
                    out += data or b""
                    break
                except subprocess.TimeoutExpired:
                    pass
            else:
                try:
                    child.wait(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    pass
            reason = (
                "cancelled"
                if self.cancelled
                else (
                    "wall-time-exceeded"
                    if self.deadline is not None and time.monotonic() >= self.deadline
                    else None
                )
            )
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

    # -------------------------------------------------------------- git
    def git_env(self) -> dict[str, str]:
        """The environment of every git step: a private HOME, the askpass helper, the spec's author.

        Creates ``CONTROL_DIR/home`` and ``askpass.sh`` (mode 0700) when missing; adds the
        repository credentials. When the spec names a CA file, git trusts that CA only:
        ``GIT_SSL_CAINFO`` is the file and ``GIT_SSL_CAPATH`` an empty directory
        (``CONTROL_DIR/ca-path``) instead of the system's — Debian's git (GnuTLS) would
        otherwise read all ~300 system certificates per fetch or push, about 70 ms of CPU.
        """
        home = self.control / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        askpass = self.control / "askpass.sh"
        if not askpass.exists():
            fd = os.open(askpass, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
            with os.fdopen(fd, "w") as f:
                f.write(ASKPASS)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": str(askpass),
            "GIT_LFS_SKIP_SMUDGE": "0",
            "GIT_AUTHOR_NAME": self.spec["author"]["name"],
            "GIT_AUTHOR_EMAIL": self.spec["author"]["email"],
            "GIT_COMMITTER_NAME": self.spec["author"]["name"],
            "GIT_COMMITTER_EMAIL": self.spec["author"]["email"],
            **self.credentials,
        }
        if self.spec.get("repository_ca_file"):
            ca_path = self.control / "ca-path"
            ca_path.mkdir(mode=0o700, exist_ok=True)
            env["GIT_SSL_CAINFO"] = self.spec["repository_ca_file"]
            env["GIT_SSL_CAPATH"] = str(ca_path)
        env.update(self.preemptive_auth())
        return env

    def preemptive_auth(self) -> dict[str, str]:
        """``GIT_CONFIG_*`` variables (git ≥ 2.31) that send the repository credentials
        as a Basic ``Authorization`` header with the first request to the repository's
        own URL (``http.<url>.extraHeader``), so a fetch or push does not first take a
        401 and start the askpass helper twice. Redirects are not followed for that URL
        (``http.<url>.followRedirects=false``): git would send the header on to the
        redirect's host. Empty without credentials or for a non-HTTP(S) URL; askpass
        stays for a server that asks anyway. The secret is in the environment only, as
        the credentials already are — never in argv or a file."""
        url = str(self.spec.get("repository", {}).get("url", ""))
        user = self.credentials.get("METALLO_GIT_USERNAME")
        token = self.credentials.get("METALLO_GIT_TOKEN")
        if not (user and token and url.startswith(("https://", "http://"))):
            return {}
        if any(c in url for c in "\n\r\0") or len(url) > 2048:
            return {}  # not a URL git would take as a config key; askpass covers it
        basic = base64.b64encode(f"{user}:{token}".encode()).decode("ascii")
        return {
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": f"http.{url}.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
            # git keeps sending an extra header after it followed a redirect, to
            # whatever host that was: a repository URL that redirects fails instead.
            "GIT_CONFIG_KEY_1": f"http.{url}.followRedirects",
            "GIT_CONFIG_VALUE_1": "false",
        }

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, raising :class:`Stopped` at once on cancellation or when
        the stage's time limit passes."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.cancelled:
                raise Stopped("cancelled", None)
            if self.deadline is not None and time.monotonic() >= self.deadline:
                raise Stopped("wall-time-exceeded", None)
            time.sleep(min(POLL_SECONDS, left))

    def push_onto_branch(self, branch: str, base: str) -> tuple[int, bool]:
        """Push ``HEAD`` to ``branch``; when git refuses because the branch moved on
        (another Run of the branch pushed first), fetch it, put this Run's own commits —
        those after ``base``, the input commit — on top of it (``git rebase
        --rebase-merges --onto``, merges kept) and push again: at most
        :data:`REBASE_ROUNDS` rounds, each after a random pause so that Runs racing for
        the branch fall out of step. Nothing is pushed when the branch no longer holds
        ``base`` (rewritten: a rebase would bring removed history back), when the
        outputs conflict, or when the rounds run out. Returns (exit code, whether this
        Run still has commits of its own on top: False when a rebase found them all
        already on the branch, e.g. the same outputs). Raises :class:`Stopped` on
        cancellation or wall time. Without this, of several Runs of one branch at once
        only the first kept its outputs (a new user's report)."""
        push = ("push", "-q", "--no-verify", "origin", f"HEAD:refs/heads/{branch}")
        tracking = f"refs/remotes/origin/{branch}"
        rc, said = self.git_retried_saying(*push)
        for round_ in range(1, REBASE_ROUNDS + 1):
            if rc == 0 or not moved_on(said):
                break
            self.note(f"the branch {branch} moved on (another Run pushed first): rebasing onto "
                      f"it (round {round_} of {REBASE_ROUNDS})")
            self.pause(random.uniform(*REBASE_PAUSE_SECONDS))
            rc = self.git_retried("fetch", "-q", "--no-tags", "origin",
                                  f"+refs/heads/{branch}:{tracking}")
            if rc != 0:
                self.note("fetching the branch failed; nothing pushed")
                return rc, True
            holds, _ = self.git("merge-base", "--is-ancestor", base, tracking)
            if holds != 0:
                self.note(f"the branch {branch} was rewritten (it no longer holds the input "
                          "commit); nothing pushed" if holds == 1 else
                          f"checking the branch {branch} failed (exit {holds}); nothing pushed")
                return 1, True
            rc, _ = self.git("-c", "filter.lfs.smudge=git-lfs smudge --skip -- %f",
                             "-c", "filter.lfs.process=git-lfs filter-process --skip",
                             "rebase", "-q", "--rebase-merges", "--onto", tracking, base)
            if rc != 0:
                _, unmerged = self.git("ls-files", "--unmerged", capture=True)
                self.git("rebase", "--abort")
                self.note(f"the outputs conflict with what another Run pushed to {branch} first; "
                          "nothing pushed" if unmerged.strip() else
                          f"rebasing onto {branch} failed (exit {rc}); nothing pushed")
                return rc, True
            _, ahead = self.git("rev-list", "--count", f"{tracking}..HEAD", capture=True)
            if ahead.strip() == "0":
                self.note(f"the branch {branch} already holds these outputs; nothing pushed")
                return 0, False
            rc, said = self.git_retried_saying(*push)
        if rc != 0:
            self.note(f"the branch {branch} moved on again after {REBASE_ROUNDS} rebases; "
                      "nothing pushed" if moved_on(said) else "pushing the results failed")
        return rc, True

    def git_retried(self, *args: str) -> int:
        """:meth:`git_retried_saying`'s exit code."""
        return self.git_retried_saying(*args)[0]

    def git_retried_saying(self, *args: str) -> tuple[int, str]:
        """``git args``, tried again after each of :data:`PUSH_RETRY_SECONDS` while it
        fails for a reason that may pass (within the stage's time limit); the last exit
        code. A refusal that cannot pass — a rejected update, a branch checked out in
        the remote, a 403, failed authentication — ends the tries at once (git says so
        on stderr, which goes to the stage log). Raises :class:`Stopped` on cancellation
        or wall time. Returns (exit code, what the last try wrote to the stage log)."""
        rc, said = self._git_saying(*args)
        for delay in PUSH_RETRY_SECONDS:
            if rc == 0 or any(marker in said for marker in PERMANENT_PUSH_FAILURES):
                break
            self.note(f"git {args[0]} {args[1] if len(args) > 1 else ''} failed "
                      f"(exit {rc}); trying again in {delay:g} s")
            self.pause(delay)
            rc, said = self._git_saying(*args)
        return rc, said

    def _git_saying(self, *args: str) -> tuple[int, str]:
        """``git args`` → (exit code, what it wrote to the stage log, at most 64 KiB)."""
        log_file = Path(self.spec["log_file"])
        before = log_file.stat().st_size
        rc, _ = self.git(*args)
        with log_file.open("rb") as written:
            written.seek(before)
            return rc, written.read(65536).decode("utf-8", "replace")

    def git(self, *args: str, capture: bool = False) -> tuple[int, str]:
        """Run ``git *args`` in the checkout as a step; return (returncode, captured stdout).

        Raises :class:`Stopped` on cancellation or wall time.
        """
        repo = Path(self.spec["repo_dir"])
        return self.run_step(["git", *args], cwd=repo, env=self.git_env(), capture=capture)

    def checkout_template(self) -> Path:
        """``CONTROL_DIR/template/`` holding only ``config`` (:data:`CHECKOUT_CONFIG`, plus
        :data:`LFS_CONFIG` when git-lfs is installed): the LFS clean/smudge filters
        without hooks (stage-out pushes LFS objects itself, with --no-verify) and none of
        git's sample hooks copied into every checkout."""
        template = self.control / "template"
        template.mkdir(mode=0o700, exist_ok=True)
        config = CHECKOUT_CONFIG + (LFS_CONFIG if shutil.which("git-lfs") else "")
        (template / "config").write_text(config)
        return template

    def lfs_files(self) -> bool:
        """Whether git-lfs is installed and the index holds at least one file whose
        ``filter`` attribute is ``lfs``. One ``git ls-files`` with an attribute pathspec:
        ``git lfs ls-files`` would start git-lfs, which starts a dozen more git processes."""
        if shutil.which("git-lfs") is None:
            return False
        rc, out = self.git("ls-files", "-z", "--", ":(attr:filter=lfs)", capture=True)
        return rc == 0 and bool(out.strip("\0\n"))

    def stage_in(self) -> dict[str, Any]:
        """Fetch the repository and check out the pinned commit on the Run's branch.

        Returns the stage outcome: ``{"exit_code": 0}`` or an ``exit_code`` with code
        ``stage-in-failed`` or ``repository-commit-missing`` (seed 004, Pinned Run inputs).
        """
        repo = Path(self.spec["repo_dir"])
        info = self.spec["repository"]
        repo.mkdir(mode=0o700, exist_ok=True)
        if (repo / ".git").exists():
            # A rerun after a restart: the remote may point elsewhere; set it afresh.
            self.git("remote", "remove", "origin")
        else:
            rc, _ = self.git("init", "-q", f"--template={self.checkout_template()}")
            if rc != 0:
                return {"exit_code": rc, "code": "stage-in-failed"}
        self.git("remote", "add", "origin", info["url"])
        commit = info["commit"]
        # The exact saved commit first: a protocol v2 server hands out any object it
        # has, and asking for one object skips the ref listing (one HTTP request and
        # one upload-pack fewer per Run). An older server refuses unadvertised objects:
        # then every branch is fetched, as a commit on no branch still fails below.
        # The commit becomes origin/<branch>: `git lfs push` at stage-out uploads only
        # what no remote-tracking ref reaches (without one it walked the whole history
        # and failed on the earlier LFS versions that stage-in never pulled).
        rc, _ = self.git(
            "fetch", "-q", "--no-tags", "origin", f"+{commit}:refs/remotes/origin/{info['branch']}"
        )
        if rc != 0:
            rc, _ = self.git(
                "fetch", "-q", "--no-tags", "origin", "+refs/heads/*:refs/remotes/origin/*"
            )
            if rc != 0:
                self.note("fetching the repository failed")
                return {"exit_code": rc, "code": "stage-in-failed"}
            if self.git("cat-file", "-e", f"{commit}^{{commit}}")[0] != 0:
                self.note(f"the repository does not have commit {commit}")
                return {"exit_code": 1, "code": "repository-commit-missing"}
        # An attached branch at the exact saved commit: moving the remote branch later
        # cannot change the input, and stage-out pushes from it.
        rc, _ = self.git("checkout", "-q", "-B", info["branch"], commit)
        if rc != 0:
            return {"exit_code": rc, "code": "stage-in-failed"}
        if self.lfs_files():
            rc, _ = self.git("lfs", "pull", "origin")
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

    def head_commit(self) -> str | None:
        """The checkout's ``HEAD`` commit (40 hex), read from ``.git`` when ``HEAD`` is a
        branch with a loose ref — what ``checkout -B`` and ``commit`` write — else from
        ``git rev-parse HEAD`` (one process); None when it cannot be told."""
        dot_git = Path(self.spec["repo_dir"]) / ".git"
        try:
            head = (dot_git / "HEAD").read_text().strip()
            if head.startswith("ref: refs/heads/") and ".." not in head:
                return (dot_git / head[len("ref: ") :]).read_text().strip()
        except OSError:
            pass
        rc, out = self.git("rev-parse", "HEAD", capture=True)
        return out.strip() if rc == 0 else None

    def stage_out(self) -> dict[str, Any]:
        """Commit every change and push ``HEAD`` to the Run's branch (LFS objects first).

        Returns ``exit_code`` and ``output_commit`` (None when nothing changed), or code
        ``stage-out-failed``; raises :class:`Stopped` on cancellation or wall time.
        """
        info = self.spec["repository"]
        # A clean status is the common case (actions that only report): one process.
        # A listed entry may still stage nothing new (a dirty submodule, a file added
        # then deleted, …), so the staged diff decides after ``add -A``.
        rc, changes = self.git("status", "--porcelain", "-z", "--untracked-files=all", capture=True)
        if rc != 0:
            return {"exit_code": 1, "code": "stage-out-failed"}
        if changes.strip("\0"):
            if self.git("add", "-A")[0] != 0:
                return {"exit_code": 1, "code": "stage-out-failed"}
            changed = self.git("diff", "--cached", "--quiet")[0] != 0
        else:
            changed = False
        if not changed and self.head_commit() == info["commit"]:
            self.note("no changes to commit; nothing pushed")
            return {"exit_code": 0, "output_commit": None}
        if changed:  # else compute committed its outputs itself: push those
            rc, _ = self.git("commit", "-q", "--no-verify", "-m", self.spec["message"])
            if rc != 0:
                return _exit(rc, "stage-out-failed")
        if self.lfs_files():
            rc = self.git_retried("lfs", "push", "origin", info["branch"])
            if rc != 0:
                return _exit(rc, "stage-out-failed")
        rc, own = self.push_onto_branch(info["branch"], info["commit"])
        if rc != 0:
            return _exit(rc, "stage-out-failed")
        if not own:
            return {"exit_code": 0, "output_commit": None}
        rc, head = self.git("rev-parse", "HEAD", capture=True)
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
