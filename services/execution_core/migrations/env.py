"""Alembic environment of Execution Core (DESIGN.md, Persistence)."""

from execution_core.adaptors.tables import metadata
from metallo.persistence.migrations import run_env

run_env(metadata)
