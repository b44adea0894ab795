"""Alembic environment of Site Coordination (DESIGN.md, Persistence)."""

from metallo.persistence.migrations import run_env
from site_coordination.adaptors.tables import metadata

run_env(metadata)
