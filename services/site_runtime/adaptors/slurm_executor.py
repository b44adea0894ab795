"""Entry point the Site Runtime's ``__main__`` uses for ``--executor slurm``.

Contract (``site_runtime.__main__.build_slurm_executor``):
``build_executor(*, env, edge_url, ca_file, credential_file, state_directory)``
returns the :class:`~site_runtime.adaptors.slurm_chain.SlurmExecutor`, a
``QueuedBatchExecutor``. Settings come from ``env`` (docs/slurm-lab.md); a
malformed value raises :class:`SettingsError` before the journal is opened.
Member tokens, repository grants and execution authority come from the Site
edge with the Runtime's ``psb_`` grant (``credential_file``, or
``SITE_API_CREDENTIAL`` in ``env``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from site_runtime.adaptors.slurm_chain import SlurmExecutor
from site_runtime.adaptors.slurm_composition import build_slurm_executor
from site_runtime.adaptors.slurm_edge import SiteEdgeAccess
from site_runtime.adaptors.slurm_settings import SettingsError, SlurmSettings

__all__ = ["SettingsError", "build_executor"]


def build_executor(
    *,
    env: Mapping[str, str],
    edge_url: str,
    ca_file: Path | None,
    credential_file: Path | None,
    state_directory: Path,
) -> SlurmExecutor:
    """The slurm executor for one Site Runtime process (see the module doc)."""
    settings_env = dict(env)
    settings_env.setdefault("RUNTIME_STATE_DIRECTORY", str(state_directory))
    settings = SlurmSettings.from_env(settings_env)
    edge = SiteEdgeAccess(
        edge_url,
        credential_file,
        ca_file=str(ca_file) if ca_file else None,
        credential=None if credential_file else env.get("SITE_API_CREDENTIAL"),
    )
    jwks_ca = (env.get("SLURM_JWKS_CA_FILE") or "").strip() or (str(ca_file) if ca_file else None)
    return build_slurm_executor(
        settings, tokens=edge, grants=edge, authority=edge, jwks_ca_file=jwks_ca
    )
