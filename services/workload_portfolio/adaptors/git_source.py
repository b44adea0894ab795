"""Source Control adapter over the real ``git`` command.

Reads one file at an exact commit from a repository named by an absolute local
path, a ``file://`` URL or an ``https://`` URL, as the operator's
:class:`~metallo.repository_policy.RepositoryPolicy` allows (https only to the
configured Git hosts; local repositories only where enabled). Each read fetches exactly one
commit (``--depth=1``) into a throw-away bare repository, so nothing is shared
between requests and a branch is resolved and fetched in one step (no race
between "which commit" and "read it").

Safety: git runs with an argument vector (never a shell); user values are
validated first and come after ``--``; only the file/https transports are
allowed; no credential prompts (``GIT_TERMINAL_PROMPT=0``, no askpass, no
credential helpers, no user or system git config); every git call has a
timeout after which its process group is killed. A credential for https is
handed to git as an ``http.extraHeader`` through ``GIT_CONFIG_*`` environment
variables — never on a command line, never in a URL, never logged.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from metallo.operations.metrics import NATIVE_REQUEST_ERRORS, NATIVE_REQUEST_SECONDS
from metallo.repository_policy import RepositoryPolicy, RepositoryRefused
from workload_portfolio.application.ports import BranchList, SourceFile
from workload_portfolio.domain.errors import InvalidArgument, SourceError
from workload_portfolio.domain.refs import COMMIT, branch_problem, relative_path_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Credential:
    """HTTPS basic credential for one host (e.g. a GitLab deploy token). Never logged."""

    username: str
    secret: str

    def __repr__(self) -> str:  # keep the secret out of tracebacks and logs
        return f"Credential(username={self.username!r}, secret=<hidden>)"


class CredentialProvider(Protocol):
    """Which credential (if any) to present to the repository at ``url``."""

    def credential_for(self, url: str) -> Credential | None:
        """The credential to present to ``url``, or None to fetch anonymously."""
        ...


@dataclass(frozen=True)
class HostCredentials:
    """Credentials by https host name (``host`` or ``host:port``); other hosts get none."""

    by_host: dict[str, Credential]

    def credential_for(self, url: str) -> Credential | None:
        """The credential listed for the https URL's ``host:port`` or ``host``; None otherwise.

        Hosts compare case-insensitively; non-https URLs never get one.
        """
        parts = urlsplit(url)
        if parts.scheme != "https":
            return None
        return self.by_host.get(parts.netloc.lower()) or self.by_host.get((parts.hostname or "").lower())


_AUTH_FAILURE = re.compile(
    r"does not appear to be a git repository|repository '.*' not found|repository not found"
    r"|authentication failed|could not read username|terminal prompts disabled"
    r"|returned error: (401|403|404)|no such file or directory|not a git repository",
    re.IGNORECASE,
)
_MISSING_REF = re.compile(r"couldn't find remote ref|no such remote ref", re.IGNORECASE)
_MISSING_OBJECT = re.compile(r"not our ref|unadvertised object|no such remote ref|bad object|invalid refspec", re.IGNORECASE)


class GitSourceControl:
    """:class:`~workload_portfolio.application.ports.SourceControl` over ``git`` (>= 2.30).

    policy: which repository URLs may be read (refusals: InvalidArgument with the
    policy's code, e.g. ``repository-host-not-allowed``).
    timeout_seconds: limit for each git process (fetch included), seconds.
    credentials: provider of https credentials (None: anonymous).
    ca_file: extra CA bundle for https (lab servers with their own CA).
    work_dir: where throw-away repositories are made (default: system temp).
    """

    def __init__(
        self,
        *,
        policy: RepositoryPolicy,
        timeout_seconds: float = 60.0,
        credentials: CredentialProvider | None = None,
        ca_file: str | None = None,
        work_dir: str | None = None,
        git: str = "git",
    ):
        self.policy = policy
        self.timeout_seconds = timeout_seconds
        self.credentials = credentials
        self.ca_file = ca_file
        self.work_dir = work_dir
        self.git = git

    async def read_file(
        self, repository_url: str, *, branch: str | None, commit: str | None, path: str, max_bytes: int
    ) -> SourceFile:
        """Read ``path`` at ``commit`` (or the current tip of ``branch``).

        Returns :class:`SourceFile` with the exact 40-hex commit. Raises
        InvalidArgument for a malformed URL/branch/commit/path and SourceError
        with code repository-not-found, branch-not-found, commit-not-found,
        file-not-found, file-too-large or source-unavailable.
        """
        url = self._check_url(repository_url)
        if commit:
            if not COMMIT.match(commit):
                raise InvalidArgument(f"commit must be 40 lower-case hex digits, got {commit!r}")
        elif branch:
            if why := branch_problem(branch):
                raise InvalidArgument(f"branch {branch!r}: {why}")
        else:
            raise InvalidArgument("name a branch or a commit")
        if why := relative_path_problem(path):
            raise InvalidArgument(f"path {path!r}: {why}")
        with tempfile.TemporaryDirectory(prefix="metallo-git-", dir=self.work_dir) as tmp:
            repo = str(Path(tmp) / "repo.git")
            env = self._env(url, home=tmp)
            await self._run(["init", "--bare", "-q", repo], env=env, what="init")
            if commit:
                rc, err = await self._try(
                    ["-C", repo, "fetch", "--depth=1", "--no-tags", "-q", "--", url, commit], env=env
                )
                if rc != 0:
                    raise self._fetch_error(err, repository_url, f"commit {commit}", "commit-not-found")
                target = commit
            else:
                rc, err = await self._try(
                    ["-C", repo, "fetch", "--depth=1", "--no-tags", "-q", "--", url,
                     f"+refs/heads/{branch}:refs/metallo/tip"],
                    env=env,
                )
                if rc != 0:
                    raise self._fetch_error(err, repository_url, f"branch {branch!r}", "branch-not-found")
                target = (await self._run(["-C", repo, "rev-parse", "--verify", "refs/metallo/tip^{commit}"],
                                          env=env, what="rev-parse")).decode().strip()
            kind = await self._try_out(["-C", repo, "cat-file", "-t", target], env=env)
            if kind != "commit":
                raise SourceError(f"{target} is not a commit in {repository_url}", code="commit-not-found")
            spec = f"{target}:{path}"
            kind = await self._try_out(["-C", repo, "cat-file", "-t", spec], env=env)
            if kind != "blob":
                raise SourceError(f"{path} does not exist at commit {target} of {repository_url}",
                                  code="file-not-found")
            size = int((await self._run(["-C", repo, "cat-file", "-s", spec], env=env, what="cat-file")).strip())
            if size > max_bytes:
                raise SourceError(f"{path} at {target} is {size} bytes; the limit is {max_bytes} bytes",
                                  code="file-too-large")
            content = await self._run(["-C", repo, "cat-file", "blob", spec], env=env, what="cat-file")
            return SourceFile(repository_url=repository_url, commit=target, path=path, content=content)

    async def list_branches(self, repository_url: str) -> BranchList:
        """The branches of the repository (``git ls-remote``, with the same credential,
        CA and safety as :meth:`read_file`): at most :data:`MAX_BRANCHES` by name.

        Raises InvalidArgument for a malformed URL and SourceError with code
        repository-not-found (missing or refused) or source-unavailable.
        """
        url = self._check_url(repository_url)
        with tempfile.TemporaryDirectory(prefix="metallo-git-", dir=self.work_dir) as tmp:
            rc, out, err = await self._exec(
                ["ls-remote", "--symref", "--", url, "HEAD", "refs/heads/*"],
                env=self._env(url, home=tmp), what="ls-remote")
        if rc != 0:
            raise self._fetch_error(err, repository_url, "the branches", "repository-not-found")
        return parse_ls_remote(out.decode("utf-8", "replace"))

    # -- helpers -------------------------------------------------------------

    def _check_url(self, url: str) -> str:
        try:
            self.policy.check(url)
        except RepositoryRefused as exc:
            raise InvalidArgument(exc.message, code=exc.code) from None
        if url.startswith("/") and not Path(url).exists():
            raise SourceError(f"repository {url} not found", code="repository-not-found")
        return url

    def _env(self, url: str, *, home: str) -> dict[str, str]:
        config: list[tuple[str, str]] = [
            ("protocol.allow", "never"),
            ("protocol.file.allow", "always"),
            ("protocol.https.allow", "always"),
            ("credential.helper", ""),
            ("http.lowSpeedLimit", "1000"),
            ("http.lowSpeedTime", str(int(max(5, self.timeout_seconds)))),
        ]
        if self.ca_file:
            config.append(("http.sslCAInfo", self.ca_file))
        cred = self.credentials.credential_for(url) if self.credentials else None
        if cred is not None:
            token = base64.b64encode(f"{cred.username}:{cred.secret}".encode()).decode()
            config.append(("http.extraHeader", f"Authorization: Basic {token}"))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "LC_ALL": "C",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "/bin/false",
            "SSH_ASKPASS": "/bin/false",
            "GCM_INTERACTIVE": "never",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_COUNT": str(len(config)),
        }
        for i, (k, v) in enumerate(config):
            env[f"GIT_CONFIG_KEY_{i}"] = k
            env[f"GIT_CONFIG_VALUE_{i}"] = v
        return env

    async def _exec(self, args: list[str], *, env: dict[str, str], what: str) -> tuple[int, bytes, str]:
        """Run git with an argument vector; kill its process group after the timeout. The
        ones that reach the repository's server (:data:`REMOTE_COMMANDS`) are measured as
        native requests (``target="git"``, ``method`` the subcommand): a non-zero exit or
        the timeout counts as an error."""
        remote = next((a for a in args if a in REMOTE_COMMANDS), None)
        if remote is None:
            return await self._exec_git(args, env=env, what=what)
        start = time.perf_counter()
        failed = True
        try:
            rc, out, err = await self._exec_git(args, env=env, what=what)
            failed = rc != 0
            return rc, out, err
        finally:
            NATIVE_REQUEST_SECONDS.labels("git", remote).observe(time.perf_counter() - start)
            if failed:
                NATIVE_REQUEST_ERRORS.labels("git", remote).inc()

    async def _exec_git(self, args: list[str], *, env: dict[str, str], what: str
                        ) -> tuple[int, bytes, str]:
        proc = await asyncio.create_subprocess_exec(
            self.git, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=self.timeout_seconds)
        except (TimeoutError, asyncio.CancelledError) as exc:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise SourceError(f"git {what} took longer than {self.timeout_seconds:g} s",
                              code="source-unavailable") from None
        return proc.returncode or 0, out, err.decode("utf-8", "replace")

    async def _try(self, args: list[str], *, env: dict[str, str]) -> tuple[int, str]:
        rc, _, err = await self._exec(args, env=env, what="fetch")
        return rc, err

    async def _try_out(self, args: list[str], *, env: dict[str, str]) -> str | None:
        rc, out, _ = await self._exec(args, env=env, what=args[2])
        return out.decode().strip() if rc == 0 else None

    async def _run(self, args: list[str], *, env: dict[str, str], what: str) -> bytes:
        rc, out, err = await self._exec(args, env=env, what=what)
        if rc != 0:
            raise SourceError(f"git {what} failed: {_last_line(err)}", code="source-unavailable")
        return out

    def _fetch_error(self, stderr: str, url: str, what: str, missing_code: str) -> SourceError:
        if _MISSING_REF.search(stderr) or (missing_code == "commit-not-found" and _MISSING_OBJECT.search(stderr)):
            return SourceError(f"{what} not found in {url}", code=missing_code)
        if _AUTH_FAILURE.search(stderr):
            return SourceError(f"repository {url} not found or not accessible", code="repository-not-found")
        log.warning("git fetch from %s failed: %s", url, _last_line(stderr))
        return SourceError(f"could not fetch from {url}: {_last_line(stderr)}", code="source-unavailable")


#: git subcommands that talk to the repository's server (the others are local).
REMOTE_COMMANDS = frozenset({"fetch", "ls-remote"})

MAX_BRANCHES = 1000  # a reply stays small whatever the repository holds


def parse_ls_remote(text: str, limit: int = MAX_BRANCHES) -> BranchList:
    """``git ls-remote --symref URL HEAD refs/heads/*`` output as a :class:`BranchList`:
    the first ``limit`` branches by name, and HEAD's branch when the server names it."""
    heads: dict[str, str] = {}
    default = ""
    for line in text.splitlines():
        value, _, ref = line.partition("\t")
        if value.startswith("ref: refs/heads/") and ref == "HEAD":
            default = value.removeprefix("ref: refs/heads/")
        elif ref.startswith("refs/heads/") and COMMIT.match(value):
            heads[ref.removeprefix("refs/heads/")] = value
    names = sorted(heads)
    return BranchList(branches=tuple((n, heads[n]) for n in names[:limit]),
                      default_branch=default, truncated=len(names) > limit)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("warning:")]
    return (lines[-1] if lines else "no output")[:300]
