"""Settings of the Workload Portfolio process, from the environment.

| variable | meaning | default |
| --- | --- | --- |
| ``METALLO_WORKLOAD_PORTFOLIO_DATABASE_URL`` | SQLAlchemy URL of the service database | ``METALLO_POSTGRES_URL`` + ``/metallo_workload_portfolio`` |
| ``METALLO_AMQP_URL`` | RabbitMQ URL | ``amqp://guest:guest@127.0.0.1:5672/`` |
| ``METALLO_GOVERNANCE_FILE`` | governance file (docs/governance.md) | ``examples/governance.yaml`` |
| ``METALLO_TOPOLOGY_PREFIX`` | prefix of exchange/queue names | empty |
| ``METALLO_GIT_TIMEOUT_SECONDS`` | limit for each git process, seconds | ``60`` |
| ``METALLO_GIT_CA_FILE`` | extra CA bundle for https repositories | none |
| ``METALLO_GIT_CREDENTIALS_FILE`` | JSON ``{"host": {"username": …, "secret": …}}`` of https credentials | none |
| ``METALLO_GIT_HOSTS``, ``METALLO_LOCAL_REPOSITORIES``, ``METALLO_STATE_DIRS`` | the repository policy (``metallo.repository_policy``) | https to no host; no local repositories |
| ``METALLO_FORBIDDEN_ENVIRONMENT`` | environment names actions may not set (``metallo.environment_policy``) | ``LD_*,GIT_*,METALLO_*,PYTHONSTARTUP`` |

Credentials are read from a file (mode 0600 advised), never from a command line,
and are only presented to the host they are listed under.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from metallo.environment_policy import EnvironmentPolicy
from metallo.messaging.broker import amqp_url_from_environment
from metallo.persistence.engine import database_url
from metallo.repository_policy import RepositoryPolicy
from workload_portfolio.adaptors.git_source import Credential, HostCredentials

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Settings:
    """The process settings (variables in the module docstring).

    ``git_timeout_seconds`` limits each git process, in seconds; ``git_credentials``
    holds https credentials by host, never logged.
    """

    database_url: str
    amqp_url: str
    governance_file: Path
    topology_prefix: str
    git_timeout_seconds: float
    git_ca_file: str | None
    git_credentials: HostCredentials
    repository_policy: RepositoryPolicy
    environment_policy: EnvironmentPolicy

    @classmethod
    def from_environment(cls) -> Settings:
        """Read the settings (table in the module doc). Raises ValueError on a bad value."""
        creds: dict[str, Credential] = {}
        cred_file = os.environ.get("METALLO_GIT_CREDENTIALS_FILE")
        if cred_file:
            raw = json.loads(Path(cred_file).read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("METALLO_GIT_CREDENTIALS_FILE must hold a JSON object by host")
            for host, c in raw.items():
                creds[host.lower()] = Credential(username=str(c["username"]), secret=str(c["secret"]))
        return cls(
            database_url=database_url("workload_portfolio"),
            amqp_url=amqp_url_from_environment(),
            governance_file=Path(os.environ.get("METALLO_GOVERNANCE_FILE", ROOT / "examples" / "governance.yaml")),
            topology_prefix=os.environ.get("METALLO_TOPOLOGY_PREFIX", ""),
            git_timeout_seconds=float(os.environ.get("METALLO_GIT_TIMEOUT_SECONDS", "60")),
            git_ca_file=os.environ.get("METALLO_GIT_CA_FILE") or None,
            git_credentials=HostCredentials(creds),
            repository_policy=RepositoryPolicy.from_environment(),
            environment_policy=EnvironmentPolicy.from_environment(),
        )
