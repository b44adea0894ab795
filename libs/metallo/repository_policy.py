"""Which repositories the platform may read and write (docs/operators.md, Trust
boundaries): a member names a repository, and a service fetches from it, so the
URL is policy, not just syntax.

- ``https://`` only to a host on the configured list of Git hosts (the lab Git
  server, GitLab): a member cannot make a service fetch from link-local or other
  internal addresses (``https://169.254.169.254/…``).
- A local path or ``file://`` URL only when the operator enables local
  repositories (the development stack does; a production composition does not),
  and never under the platform's own state directories (the lab Git server's
  repositories, secrets, journals), whatever symbolic links lead there.
- Nothing else: ``http``, ``ssh``, ``git`` and other transports are refused.

Settings (environment):

| variable | meaning | default |
| --- | --- | --- |
| ``METALLO_GIT_HOSTS`` | comma-separated ``host`` or ``host:port`` (port 443 when omitted) | none: every https host refused |
| ``METALLO_LOCAL_REPOSITORIES`` | ``allow``: local paths and ``file://`` | refused |
| ``METALLO_STATE_DIRS`` | extra state directories, ``:``-separated | ``/var/lib/metallo`` only |
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

MAX_URL = 2048
DEFAULT_STATE_DIRS = ("/var/lib/metallo",)


class RepositoryRefused(ValueError):
    """A repository URL the policy refuses: stable ``code`` and a message saying why
    and what to do. Codes: ``repository-url-invalid``, ``repository-scheme-not-allowed``,
    ``repository-host-not-allowed``, ``repository-local-not-allowed``,
    ``repository-in-platform-state``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


#: What a refused transport is told to use instead.
ALLOWED_SCHEMES = ("repositories are https:// URLs of the platform's Git hosts (local paths "
                   "and file:// only where the operator enables them)")


def scheme_refusal(url: str) -> RepositoryRefused | None:
    """The ``repository-scheme-not-allowed`` refusal of ``url`` when it names a transport
    other than ``https://`` or ``file://`` (``http://``, ``ssh://``, ``git://``, the scp
    form ``user@host:path``...), else None. A local path (no scheme) is not judged here.
    Needs no operator settings, so every entry point can say it first."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("https", "file"):
        return None
    if scheme and "://" in url:
        shown = f"{scheme}://"
    elif not scheme and not url.startswith(("/", ".", "~")) and "@" in url.split(":", 1)[0] \
            and ":" in url:
        shown = "ssh (user@host:path)"
    else:
        return None
    return RepositoryRefused("repository-scheme-not-allowed",
                             f"{shown} is not allowed: {ALLOWED_SCHEMES}")


def _host_key(host: str, port: int | None) -> str:
    host = host.lower().rstrip(".")
    return f"[{host}]:{port or 443}" if ":" in host else f"{host}:{port or 443}"


def _entry_key(entry: str) -> str:
    """``host`` / ``host:port`` / ``[v6]:port`` as compared; ValueError when malformed."""
    parts = urlsplit("https://" + entry.strip())
    if not parts.hostname or parts.path or parts.query or parts.username:
        raise ValueError(f"METALLO_GIT_HOSTS entry {entry!r} is not host or host:port")
    return _host_key(parts.hostname, parts.port)


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


@dataclass(frozen=True)
class RepositoryPolicy:
    """The operator's repository policy (see the module doc).

    ``git_hosts``: keys as ``host:port`` (lower-case, IPv6 in brackets);
    ``state_dirs``: absolute directories no local repository may be under.
    """

    git_hosts: frozenset[str] = frozenset()
    allow_local: bool = False
    state_dirs: tuple[str, ...] = DEFAULT_STATE_DIRS

    @classmethod
    def of(cls, git_hosts: Iterable[str] = (), *, allow_local: bool = False,
           state_dirs: Iterable[str] = ()) -> RepositoryPolicy:
        """Build from ``host``/``host:port`` entries and extra state directories
        (``/var/lib/metallo`` is always one). ValueError for a malformed entry."""
        dirs = [*DEFAULT_STATE_DIRS, *(d for d in state_dirs if d)]
        return cls(git_hosts=frozenset(_entry_key(h) for h in git_hosts if h.strip()),
                   allow_local=allow_local,
                   state_dirs=tuple(dict.fromkeys(os.path.realpath(d) for d in dirs)))

    @classmethod
    def from_environment(cls) -> RepositoryPolicy:
        """Read the variables of the module doc. ValueError for a malformed value."""
        local = os.environ.get("METALLO_LOCAL_REPOSITORIES", "").strip()
        if local not in ("", "allow", "refuse"):
            raise ValueError("METALLO_LOCAL_REPOSITORIES is 'allow' or 'refuse'")
        return cls.of(os.environ.get("METALLO_GIT_HOSTS", "").split(","),
                      allow_local=local == "allow",
                      state_dirs=os.environ.get("METALLO_STATE_DIRS", "").split(os.pathsep))

    def check(self, url: str) -> str:
        """Return ``url`` when the policy accepts it; raise :class:`RepositoryRefused`.

        A local path must be absolute; it is compared after resolving symbolic links.
        """
        if not url or len(url) > MAX_URL or any(ord(c) < 33 or ord(c) == 127 for c in url):
            raise RepositoryRefused("repository-url-invalid",
                                    f"a repository URL is 1 to {MAX_URL} characters without "
                                    "spaces or control characters")
        if url.startswith("/"):
            return self._local(url, url)
        parts = urlsplit(url)
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise RepositoryRefused("repository-url-invalid",
                                        "file:// URLs name a local path (file:///path)")
            return self._local(unquote(parts.path), url)
        refused = scheme_refusal(url)
        if refused is not None:
            raise refused
        if parts.scheme != "https":
            raise RepositoryRefused("repository-scheme-not-allowed", ALLOWED_SCHEMES)
        if parts.username is not None or parts.password is not None:
            raise RepositoryRefused("repository-url-invalid",
                                    "credentials do not belong in repository URLs; the "
                                    "platform supplies them")
        try:
            key = _host_key(parts.hostname or "", parts.port)
        except ValueError:
            raise RepositoryRefused("repository-url-invalid", "the URL's port is invalid") from None
        if not parts.hostname or key not in self.git_hosts:
            allowed = ", ".join(sorted(self.git_hosts)) or "none configured"
            raise RepositoryRefused("repository-host-not-allowed",
                                    f"{parts.hostname or '(no host)'} is not one of the "
                                    f"platform's Git hosts ({allowed}; METALLO_GIT_HOSTS)")
        return url

    def _local(self, path: str, url: str) -> str:
        if not self.allow_local:
            raise RepositoryRefused("repository-local-not-allowed",
                                    "local repositories are not enabled here: use an https:// "
                                    "URL of the platform's Git hosts")
        if not path.startswith("/"):
            raise RepositoryRefused("repository-url-invalid", "a local repository path is absolute")
        real = os.path.realpath(path)
        for directory in self.state_dirs:
            if _inside(real, directory):
                raise RepositoryRefused("repository-in-platform-state",
                                        f"{url} is inside the platform's own state "
                                        f"({directory}); publish the repository instead "
                                        "(`metallo dev publish DIR`)")
        return url
