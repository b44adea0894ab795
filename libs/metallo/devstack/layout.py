"""Paths of the development stack under ``<repo>/var/dev`` (git-ignored)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Layout:
    """Where the dev stack keeps state, logs, certificates, secrets and repositories."""

    root: Path

    @classmethod
    def default(cls) -> Layout:
        """``$METALLO_DEV_STATE`` or ``<repo>/var/dev``."""
        explicit = os.environ.get("METALLO_DEV_STATE")
        return cls(Path(explicit) if explicit else REPO_ROOT / "var" / "dev")

    @property
    def state_file(self) -> Path:
        """``state.json``: what the supervisor runs (written by it on every change)."""
        return self.root / "state.json"

    @property
    def logs(self) -> Path:
        """The directory of ``stack.log`` and one ``<component>.log`` per component."""
        return self.root / "logs"

    @property
    def stack_log(self) -> Path:
        """Every component's lines, prefixed with its name."""
        return self.logs / "stack.log"

    @property
    def certs(self) -> Path:
        """The development TLS files (``ca.pem``, ``server.pem``...)."""
        return self.root / "certs"

    @property
    def secrets(self) -> Path:
        """Mode 0700: the Git operator token, the Git credentials file, the runtime grant."""
        return self.root / "secrets"

    @property
    def git_root(self) -> Path:
        """The lab Git server's repositories."""
        return self.root / "git"

    @property
    def issuer(self) -> Path:
        """Mode 0700: the lab token issuer's key (``private.pem``, 0600) and ``jwks.json``,
        kept across ``dev down``/``dev up`` (``--fresh`` replaces them)."""
        return self.root / "issuer"

    @property
    def runtime(self) -> Path:
        """The Site Runtime's state, one subdirectory per executor."""
        return self.root / "runtime"

    def make(self) -> None:
        """Create the directories (secrets and the issuer's with mode 0700)."""
        for path in (self.root, self.logs, self.certs, self.git_root, self.runtime):
            path.mkdir(parents=True, exist_ok=True)
        for private in (self.secrets, self.issuer):
            private.mkdir(parents=True, exist_ok=True)
            os.chmod(private, 0o700)


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (created that way, never world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
