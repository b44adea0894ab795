"""Reading executor settings from the environment (docs/site-runtime.md, each executor's
settings table): the rule every ``RUNTIME_LOCAL_*`` and ``KUBERNETES_*`` integer follows.
A malformed value raises :class:`SettingsError`, so the Runtime does not start."""

from __future__ import annotations

from collections.abc import Mapping

MAX_INT = 2_147_483_647


class SettingsError(ValueError):
    """An executor setting is malformed; the Runtime does not start."""


def env_int(env: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    """``env[name]`` as an integer from ``minimum`` to :data:`MAX_INT`; ``default`` when
    unset or blank. Raises SettingsError naming the variable otherwise."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer") from None
    if not minimum <= value <= MAX_INT:
        raise SettingsError(f"{name} must be between {minimum} and {MAX_INT}")
    return value
