"""Settings of the Pipeline Coordination process, from the environment.

| variable | meaning | default |
| --- | --- | --- |
| ``METALLO_PIPELINE_COORDINATION_DATABASE_URL`` | SQLAlchemy URL of the service database | ``METALLO_POSTGRES_URL`` + ``/metallo_pipeline_coordination`` |
| ``METALLO_AMQP_URL`` | RabbitMQ URL | ``amqp://guest:guest@127.0.0.1:5672/`` |
| ``METALLO_GOVERNANCE_FILE`` | governance file (docs/governance.md) | ``examples/governance.yaml`` |
| ``METALLO_TOPOLOGY_PREFIX`` | prefix of exchange and queue names | empty |
| ``METALLO_PIPELINE_COORDINATION_<NAME>`` | a timing field below, e.g. ``..._POLL_SECONDS=0.5`` | see :class:`Settings` |

Every duration is in seconds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from pipeline_coordination.domain.pipeline import Timing


@dataclass(frozen=True)
class Settings:
    """Timing and batching of the coordinator."""

    poll_seconds: float = 1.0  # idle wait between two coordinator passes
    lease_seconds: float = 30.0  # fenced lease of a claimed Pipeline (PostgreSQL clock)
    batch: int = 10  # Pipelines claimed per pass
    request_timeout_seconds: float = 30.0  # reply timeout of PrepareBranch/PrepareAction/LaunchRun/...
    service_poll_seconds: float = 5.0  # between readiness checks of a launched service step
    batch_recheck_seconds: float = 60.0  # safety re-read of a batch Run whose RunCompleted is awaited
    service_ready_timeout_seconds: float = 1800.0  # a service step not healthy by then fails
    retry_base_seconds: float = 1.0  # first wait after an owner did not answer (doubles)
    retry_max_seconds: float = 60.0  # longest such wait

    def timing(self) -> Timing:
        """The domain :class:`Timing` built from these settings (every field in seconds)."""
        return Timing(
            service_poll=self.service_poll_seconds,
            batch_recheck=self.batch_recheck_seconds,
            service_ready_timeout=self.service_ready_timeout_seconds,
            retry_base=self.retry_base_seconds,
            retry_max=self.retry_max_seconds,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read ``METALLO_PIPELINE_COORDINATION_<FIELD>`` overrides; ValueError for a bad value."""
        env = os.environ if env is None else env
        values = {}
        for f in fields(cls):
            name = f"METALLO_PIPELINE_COORDINATION_{f.name.upper()}"
            raw = env.get(name)
            if raw is None:
                continue
            value = int(raw) if f.type in ("int", int) else float(raw)
            if value <= 0:
                raise ValueError(f"{name} must be positive")
            values[f.name] = value
        return cls(**values)
