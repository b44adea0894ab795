"""Wiring of the slurm executor (seed 000, Packages and composition).

``slurm_executor_from_env`` is what the Site Runtime's ``__main__`` calls when the
Site's environment is ``slurm``: settings are validated before the journal is
opened (a malformed value stops startup with :class:`SettingsError`), member
tokens and repository grants come from the Site edge with the Runtime's ``psb_``
grant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from metallo.identity.verify import (
    FileJwksSource,
    HttpJwksSource,
    JwksCache,
    JwksSource,
    MemberTokenVerifier,
)
from site_runtime.adaptors.slurm_access import SlurmRest
from site_runtime.adaptors.slurm_chain import SlurmExecutor
from site_runtime.adaptors.slurm_edge import MemberTokens, RepositoryGrants, SiteEdgeAccess
from site_runtime.adaptors.slurm_journal import SlurmJournal
from site_runtime.adaptors.slurm_settings import SettingsError, SlurmSettings


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
    """An executor over ``settings`` with the given token and grant sources."""
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


def slurm_executor_from_env(
    site_api_url: str, credential_file: Path, site_ca_file: str | None = None
) -> SlurmExecutor:
    """The production composition: settings from the environment, the Site edge as owner.

    ``SLURM_JWKS_CA_FILE`` (optional) verifies an https JWKS; it defaults to the
    Site edge's CA, since the lab issuer is served there.
    """
    settings = SlurmSettings.from_env()
    edge = SiteEdgeAccess(site_api_url, credential_file, ca_file=site_ca_file)
    jwks_ca = (os.environ.get("SLURM_JWKS_CA_FILE") or "").strip() or site_ca_file
    return build_slurm_executor(settings, tokens=edge, grants=edge, jwks_ca_file=jwks_ca)
