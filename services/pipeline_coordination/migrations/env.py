"""Alembic environment of Pipeline Coordination (DESIGN.md, Persistence)."""

from metallo.persistence.migrations import run_env
from pipeline_coordination.adaptors.tables import metadata

run_env(metadata)
