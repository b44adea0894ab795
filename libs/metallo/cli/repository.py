"""The REPO argument: a local path becomes an absolute path (what the Workload
Portfolio reads in development); ``file://`` and ``https://`` URLs are kept as
written (a Workload is per exact URL, docs/actions.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit

from metallo.cli.exits import CliError, Exit
from metallo.cli.render import err
from metallo.repository_policy import scheme_refusal

MAX_URL = 2048


def repository_url(repo: str) -> str:
    """Normalise REPO; CliError (exit 2) for an empty, overlong or unsupported value (a
    transport other than https:// or file:// is ``repository-scheme-not-allowed``, as the
    platform would say; docs/actions.md)."""
    if not repo or len(repo) > MAX_URL:
        raise CliError("REPO is empty or longer than 2048 characters",
                       "pass a repository path or an https:// or file:// URL", Exit.USAGE)
    parts = urlsplit(repo)
    scheme = parts.scheme
    if scheme == "https":
        return repo
    if scheme == "file":
        check_local_repository(Path(unquote(parts.path)), repo)
        return repo
    refused = scheme_refusal(repo)
    if refused is not None:
        raise CliError(f"{repo}: {refused.message}", "use the repository's https:// URL (or, in "
                       "development, its local path)", Exit.USAGE, code=refused.code)
    path = Path(repo).expanduser()
    check_local_repository(path, repo)
    return str(path.resolve())


def check_local_repository(path: Path, written: str) -> None:
    """Check a local repository (``written``: REPO as given). CliError (exit 3,
    ``repository-not-found``) when ``path`` is no directory, or not itself a Git
    repository — git says it is none, or it is a plain
    directory inside another repository's work tree, which git would otherwise take for
    that one. A warning (stderr) when it has a work tree: git refuses a push to its
    checked-out branch (also through its ``.git`` directory), so an action that changes
    files would fail at stage-out (``stage-out-failed``). Reading works; a bare
    repository, or one published on the lab Git server, takes pushes. Silent when git
    cannot tell (not installed, a repository it will not read here, …)."""
    if not path.is_dir():
        raise CliError(f"{written}: no such local repository",
                       "pass an existing repository directory or an https:// URL",
                       Exit.NOT_FOUND, code="repository-not-found")
    # The caller's GIT_DIR, GIT_WORK_TREE, … would answer for another repository.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        asked = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--is-bare-repository", "--absolute-git-dir",
             "--show-toplevel"], capture_output=True, text=True, timeout=10, check=False,
            env=env)
    except (OSError, subprocess.TimeoutExpired):
        return
    if "not a git repository" in asked.stderr.lower():
        raise _not_a_repository(path)
    answer = asked.stdout.split("\n")
    here = path.resolve()
    if answer[0] == "true" and len(answer) >= 2 and answer[1] and \
            Path(answer[1]).resolve() == here:
        return  # a bare repository: it takes pushes
    if len(answer) >= 2 and answer[1] and Path(answer[1]).resolve() == here:
        _warn_checked_out(path)  # the .git directory of a work tree: same refusal
        return
    if asked.returncode != 0 or len(answer) < 3 or not answer[2]:
        return  # git cannot tell: the platform's own read will say
    if Path(answer[2]).resolve() != here:
        raise _not_a_repository(path)  # a directory inside another work tree
    _warn_checked_out(path)


def _warn_checked_out(path: Path) -> None:
    err.print(f"warning: {path} has a work tree, so git refuses pushes to its checked-out "
              "branch: an action that changes files fails at stage-out. Use a bare clone "
              "(`git clone --bare`) or `metallo dev publish DIR` (the lab Git server).",
              markup=False, highlight=False)


def _not_a_repository(path: Path) -> CliError:
    return CliError(f"{path} is not a Git repository",
                    "pass a repository's top directory (or a bare repository), or put the "
                    "directory on the lab Git server with `metallo dev publish DIR`",
                    Exit.NOT_FOUND, code="repository-not-found")
