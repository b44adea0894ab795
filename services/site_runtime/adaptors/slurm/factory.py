"""Wiring of the slurm executor; ``__main__`` calls :func:`build_executor` for
``--executor slurm`` (docs/slurm-lab.md, Settings).

Settings come from the environment and are validated before the journal is
opened (a malformed value raises :class:`SettingsError`, which stops startup).
Member tokens, repository grants, execution authority and read permits come from
the Site edge client the worker also uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metallo.identity.verify import (
    FileJwksSource,
    HttpJwksSource,
    JwksCache,
    JwksSource,
    MemberTokenVerifier,
)
from site_runtime.adaptors.edge.client import EdgeClient
from site_runtime.adaptors.slurm.executor import SlurmExecutor
from site_runtime.adaptors.slurm.journal import SlurmJournal
from site_runtime.adaptors.slurm.rest import SlurmRest
from site_runtime.adaptors.slurm.settings import SettingsError, SlurmSettings
from site_runtime.application.site_access import MemberTokens, RepositoryGrants

__all__ = ["SettingsError", "build_executor", "build_slurm_executor", "jwks_source"]


def jwks_source(url: str, ca_file: str | None = None) -> JwksSource:
    """``file:/path`` → :class:`FileJwksSource`; http(s) → :class:`HttpJwksSource`."""
    if url.startswith("file:"):
        return FileJwksSource(Path(url.removeprefix("file://").removeprefix("file:")))
    try:
        return HttpJwksSource(url, verify=ca_file if ca_file else True)
    except ValueError as error:
        raise SettingsError(f"SLURM_JWKS_URL: {error}") from None


def build_slurm_executor(
    settings: SlurmSettings,
    *,
    tokens: MemberTokens,
    grants: RepositoryGrants,
    jwks_ca_file: str | None = None,
    **executor_options: Any,
) -> SlurmExecutor:
    """An executor over ``settings`` with the given token and grant sources
    (``executor_options``: ``authority``, ``clock``, ``fault``)."""
    verifier = MemberTokenVerifier(
        issuer=settings.jwt_issuer,
        authorized_party=settings.jwt_authorized_party,
        keys=JwksCache(jwks_source(settings.jwks_url, jwks_ca_file)),
    )
    try:
        rest = SlurmRest(
            settings.rest_url,
            verifier,
            allow_insecure_loopback=settings.allow_insecure_loopback,
            verify_tls=settings.ca_file if settings.ca_file else True,
        )
    except ValueError as error:
        raise SettingsError(f"SLURM_REST_URL: {error}") from None
    journal = SlurmJournal(settings.state_directory / "jobs.sqlite")
    return SlurmExecutor(
        settings=settings,
        journal=journal,
        rest=rest,
        tokens=tokens,
        grants=grants,
        **executor_options,
    )


def build_executor(
    *,
    env: Mapping[str, str],
    edge: EdgeClient,
    ca_file: Path | None,
    state_directory: Path,
) -> SlurmExecutor:
    """The slurm executor of one Site Runtime process: ``SLURM_*`` settings from
    ``env`` (``RUNTIME_STATE_DIRECTORY`` defaults to ``state_directory``), the Site
    ``edge`` as member tokens, grants, authority and read permits. ``SLURM_JWKS_CA_FILE``
    (optional) verifies an https JWKS; it defaults to the edge's CA (``ca_file``),
    since the lab issuer is served there. Raises :class:`SettingsError`."""
    settings_env = dict(env)
    settings_env.setdefault("RUNTIME_STATE_DIRECTORY", str(state_directory))
    settings = SlurmSettings.from_env(settings_env)
    jwks_ca = (env.get("SLURM_JWKS_CA_FILE") or "").strip() or (str(ca_file) if ca_file else None)
    return build_slurm_executor(
        settings, tokens=edge, grants=edge, authority=edge, jwks_ca_file=jwks_ca
    )
