"""Persistence helpers shared by the platform services (DESIGN.md, Persistence).

- :mod:`.engine` — async SQLAlchemy engines over asyncpg, database URLs, create/drop.
- :mod:`.migrations` — run a service's Alembic migrations programmatically.
- :mod:`.leases` — fenced leases on durable work rows, timed by PostgreSQL's clock.
"""

from metallo.persistence.engine import (
    create_engine,
    database_url,
    drop_database,
    ensure_database,
    session_factory,
)
from metallo.persistence.leases import Claim, LeaseLost, claim_rows, fenced_update, release

__all__ = [
    "Claim",
    "LeaseLost",
    "claim_rows",
    "create_engine",
    "database_url",
    "drop_database",
    "ensure_database",
    "fenced_update",
    "release",
    "session_factory",
]
