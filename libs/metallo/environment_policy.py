"""Environment names an action may not set (docs/actions.md, Environment): the
dynamic loader's ``LD_*`` (``LD_PRELOAD`` runs code in every process), ``GIT_*``
(redirects the platform's own stage-in and stage-out git), ``METALLO_*`` (the
platform's) and ``PYTHONSTARTUP``. Refused when the action is validated, with
the line; every other name passes.

``METALLO_FORBIDDEN_ENVIRONMENT`` (comma-separated names, ``PREFIX*`` for a
prefix) replaces the list; ``METALLO_*`` stays forbidden whatever it says.
Names compare case-insensitively.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_FORBIDDEN = ("LD_*", "GIT_*", "METALLO_*", "PYTHONSTARTUP")
ALWAYS_FORBIDDEN = ("METALLO_*",)
_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\*?$")


@dataclass(frozen=True)
class EnvironmentPolicy:
    """Forbidden names (``NAME`` exact, ``PREFIX*`` by prefix), upper-case."""

    forbidden: tuple[str, ...] = DEFAULT_FORBIDDEN

    @classmethod
    def of(cls, patterns: Iterable[str]) -> EnvironmentPolicy:
        """The policy forbidding ``patterns`` plus ``METALLO_*``; ValueError for a
        pattern that is not ``NAME`` or ``PREFIX*``."""
        chosen = [p.strip() for p in patterns if p.strip()]
        for p in chosen:
            if not _PATTERN.match(p):
                raise ValueError(f"forbidden environment entry {p!r} is not NAME or PREFIX*")
        return cls(tuple(dict.fromkeys(p.upper() for p in [*chosen, *ALWAYS_FORBIDDEN])))

    @classmethod
    def from_environment(cls) -> EnvironmentPolicy:
        """``METALLO_FORBIDDEN_ENVIRONMENT`` when set, else the default list."""
        raw = os.environ.get("METALLO_FORBIDDEN_ENVIRONMENT")
        return cls() if raw is None else cls.of(raw.split(","))

    def forbidding(self, name: str) -> str | None:
        """The entry that forbids ``name`` (e.g. ``LD_*``), or None when it may be set."""
        upper = name.upper()
        for p in self.forbidden:
            if upper.startswith(p[:-1]) if p.endswith("*") else upper == p:
                return p
        return None
