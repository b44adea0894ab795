"""Alembic environment of the Workload Portfolio (DESIGN.md, Persistence)."""

from metallo.persistence.migrations import run_env
from workload_portfolio.adaptors.tables import metadata

run_env(metadata)
