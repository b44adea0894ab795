"""The REPO argument: a local path becomes an absolute path (what the Workload
Portfolio reads in development); ``file://`` and ``https://`` URLs are kept as
written (a Workload is per exact URL, docs/actions.md)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from metallo.cli.exits import CliError, Exit

MAX_URL = 2048


def repository_url(repo: str) -> str:
    """Normalise REPO; CliError (exit 2) for an empty, overlong or unsupported value."""
    if not repo or len(repo) > MAX_URL:
        raise CliError("REPO is empty or longer than 2048 characters",
                       "pass a repository path or an https:// or file:// URL", Exit.USAGE)
    scheme = urlsplit(repo).scheme
    if scheme in ("https", "file"):
        return repo
    if scheme in ("http", "ssh", "git"):
        raise CliError(f"{scheme}:// repositories are not supported",
                       "use an https:// URL (or a local path in development)", Exit.USAGE)
    path = Path(repo).expanduser()
    if not path.exists():
        raise CliError(f"{repo}: no such local repository",
                       "pass an existing path or an https:// URL", Exit.NOT_FOUND,
                       code="repository-not-found")
    return str(path.resolve())
