"""Git in a local Attempt's checkout, for the stage runner (standard library only).

Every git command runs as a step of the stage (its own process group, stopped on
cancellation or wall time) with a private HOME, the askpass helper and the
repository credentials from the runner's environment only — never argv or a file.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
from pathlib import Path
from typing import Any, Protocol


class Steps(Protocol):
    """What git needs of the runner: the stage log, steps and pauses it can stop."""

    def note(self, text: str) -> None: ...

    def run_step(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], capture: bool = False
    ) -> tuple[int, str]: ...

    def pause(self, seconds: float) -> None: ...


ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$METALLO_GIT_USERNAME" ;;
  *) printf '%s\\n' "$METALLO_GIT_TOKEN" ;;
esac
"""
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


class CheckoutGit:
    """Git commands in the checkout ``spec["repo_dir"]`` of one stage."""

    def __init__(
        self, steps: Steps, control: Path, spec: dict[str, Any], credentials: dict[str, str]
    ) -> None:
        self.steps = steps
        self.control = control
        self.spec = spec
        self.credentials = credentials

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
        cancellation or wall time. Several Runs of one branch at once all keep their
        outputs this way, not only the first to push."""
        push = ("push", "-q", "--no-verify", "origin", f"HEAD:refs/heads/{branch}")
        tracking = f"refs/remotes/origin/{branch}"
        rc, said = self.git_retried_saying(*push)
        for round_ in range(1, REBASE_ROUNDS + 1):
            if rc == 0 or not moved_on(said):
                break
            self.steps.note(f"the branch {branch} moved on (another Run pushed first): rebasing onto "
                      f"it (round {round_} of {REBASE_ROUNDS})")
            self.steps.pause(random.uniform(*REBASE_PAUSE_SECONDS))
            rc = self.git_retried("fetch", "-q", "--no-tags", "origin",
                                  f"+refs/heads/{branch}:{tracking}")
            if rc != 0:
                self.steps.note("fetching the branch failed; nothing pushed")
                return rc, True
            holds, _ = self.git("merge-base", "--is-ancestor", base, tracking)
            if holds != 0:
                self.steps.note(f"the branch {branch} was rewritten (it no longer holds the input "
                          "commit); nothing pushed" if holds == 1 else
                          f"checking the branch {branch} failed (exit {holds}); nothing pushed")
                return 1, True
            rc, _ = self.git("-c", "filter.lfs.smudge=git-lfs smudge --skip -- %f",
                             "-c", "filter.lfs.process=git-lfs filter-process --skip",
                             "rebase", "-q", "--rebase-merges", "--onto", tracking, base)
            if rc != 0:
                _, unmerged = self.git("ls-files", "--unmerged", capture=True)
                self.git("rebase", "--abort")
                self.steps.note(f"the outputs conflict with what another Run pushed to {branch} first; "
                          "nothing pushed" if unmerged.strip() else
                          f"rebasing onto {branch} failed (exit {rc}); nothing pushed")
                return rc, True
            _, ahead = self.git("rev-list", "--count", f"{tracking}..HEAD", capture=True)
            if ahead.strip() == "0":
                self.steps.note(f"the branch {branch} already holds these outputs; nothing pushed")
                return 0, False
            rc, said = self.git_retried_saying(*push)
        if rc != 0:
            self.steps.note(f"the branch {branch} moved on again after {REBASE_ROUNDS} rebases; "
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
            self.steps.note(f"git {args[0]} {args[1] if len(args) > 1 else ''} failed "
                      f"(exit {rc}); trying again in {delay:g} s")
            self.steps.pause(delay)
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
        return self.steps.run_step(["git", *args], cwd=repo, env=self.git_env(), capture=capture)

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
