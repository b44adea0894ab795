"""Settings of the Site Coordination process, from the environment (docs/site-edge.md).

| variable | meaning | default |
| --- | --- | --- |
| ``METALLO_SITE_COORDINATION_DATABASE_URL`` | the service database | ``METALLO_POSTGRES_URL``/metallo_site_coordination |
| ``METALLO_AMQP_URL`` | RabbitMQ | ``amqp://guest:guest@127.0.0.1:5672/`` |
| ``METALLO_TOPOLOGY_PREFIX`` | exchange/queue name prefix | empty |
| ``METALLO_SITE_EDGE_HOST`` / ``_PORT`` | edge listen address | ``127.0.0.1`` / ``8443`` |
| ``METALLO_SITE_EDGE_TLS_CERT`` / ``_KEY`` | PEM certificate chain / key files | none (required) |
| ``METALLO_SITE_EDGE_INSECURE_LOOPBACK`` | ``1``: plain HTTP, loopback only | off |
| ``METALLO_SITE_EDGE_REUSE_PORT`` | ``1``: replicas on one host share the port | off |
| ``METALLO_SITE_EDGE_MAX_BODY_BYTES`` | request body bound | 262144 |
| ``METALLO_SITE_EDGE_API_DOCS`` | ``1``: serve ``/docs``, ``/redoc``, ``/openapi.json`` | off |
| ``METALLO_REPOSITORY_GRANT_SECONDS`` | repository grant lifetime | 7200 |
| ``METALLO_MEMBER_TOKEN_SECONDS`` | member token lifetime (≤ 3600) | 3600 |
| ``METALLO_GOVERNANCE_FILE`` | the governance YAML | ``examples/governance.yaml`` |
| ``METALLO_DEFERRALS_FILE`` | deferral catalogue | ``contracts/deferrals.json`` |
| ``METALLO_LAB_ISSUER_KEY`` | RS256 private key (PEM) | generated in ``METALLO_LAB_ISSUER_DIR`` |
| ``METALLO_LAB_ISSUER_DIR`` | where to generate a key | ``/var/lib/metallo/issuer`` |
| ``METALLO_LAB_ISSUER_URL`` / ``_AZP`` | ``iss`` / ``azp`` claims | see ``metallo.identity.issuer`` |
| ``METALLO_LAB_GIT_ROOT`` | lab Git repositories; unset = no Git server | unset |
| ``METALLO_LAB_GIT_OPERATOR_TOKEN_FILE`` | file holding the operator's Git password | unset |
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from metallo.messaging.broker import amqp_url_from_environment
from metallo.persistence.engine import database_url
from site_coordination.adaptors.deferral_catalogue import DEFAULT_PATH as DEFAULT_DEFERRALS
from site_coordination.adaptors.edge.app import EdgeSettings
from site_coordination.adaptors.edge.server import ServeOptions

ROOT = Path(__file__).resolve().parents[3]


def _path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


@dataclass
class Settings:
    """Everything ``python -m site_coordination serve`` needs."""

    database_url: str
    amqp_url: str
    topology_prefix: str
    serve: ServeOptions
    edge: EdgeSettings
    governance_file: Path
    deferrals_file: Path
    issuer_dir: Path
    lab_git_root: Path | None
    lab_git_operator_token_file: Path | None

    @classmethod
    def from_environment(cls) -> Settings:
        """Read the variables in the module table; ValueError for a bad number."""
        env = os.environ.get
        return cls(
            database_url=database_url("site_coordination"),
            amqp_url=amqp_url_from_environment(),
            topology_prefix=env("METALLO_TOPOLOGY_PREFIX", ""),
            serve=ServeOptions(
                host=env("METALLO_SITE_EDGE_HOST", "127.0.0.1"),
                port=int(env("METALLO_SITE_EDGE_PORT", "8443")),
                cert_file=_path("METALLO_SITE_EDGE_TLS_CERT"),
                key_file=_path("METALLO_SITE_EDGE_TLS_KEY"),
                insecure_loopback=env("METALLO_SITE_EDGE_INSECURE_LOOPBACK", "") == "1",
                reuse_port=env("METALLO_SITE_EDGE_REUSE_PORT", "") == "1",
            ),
            edge=EdgeSettings(
                max_body_bytes=int(env("METALLO_SITE_EDGE_MAX_BODY_BYTES", "262144")),
                repository_grant_seconds=int(env("METALLO_REPOSITORY_GRANT_SECONDS", "7200")),
                member_token_seconds=min(3600, int(env("METALLO_MEMBER_TOKEN_SECONDS", "3600"))),
                api_docs=env("METALLO_SITE_EDGE_API_DOCS", "") == "1",
            ),
            governance_file=_path("METALLO_GOVERNANCE_FILE") or ROOT / "examples" / "governance.yaml",
            deferrals_file=_path("METALLO_DEFERRALS_FILE") or DEFAULT_DEFERRALS,
            issuer_dir=_path("METALLO_LAB_ISSUER_DIR") or Path("/var/lib/metallo/issuer"),
            lab_git_root=_path("METALLO_LAB_GIT_ROOT"),
            lab_git_operator_token_file=_path("METALLO_LAB_GIT_OPERATOR_TOKEN_FILE"),
        )
