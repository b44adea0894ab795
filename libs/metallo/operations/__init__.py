"""A service's operations endpoint (docs/operators.md, Probes and metrics): one
loopback HTTP server per process with ``/healthz``, ``/readyz`` and ``/metrics``."""

from metallo.operations.readiness import (
    Check,
    Readiness,
    broker_check,
    consumers_check,
    database_check,
    migrations_check,
    service_readiness,
    started_check,
)
from metallo.operations.server import OPS_ADDRESS_ENV, OpsServer, ops_address

__all__ = [
    "OPS_ADDRESS_ENV",
    "Check",
    "OpsServer",
    "Readiness",
    "broker_check",
    "consumers_check",
    "database_check",
    "migrations_check",
    "service_readiness",
    "started_check",
    "ops_address",
]
