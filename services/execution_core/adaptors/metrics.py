"""Execution Core's database metrics, read at scrape time (docs/operators.md, Metrics):
Runs by phase and the launch → native start latency of every started Run."""

from __future__ import annotations

from prometheus_client.core import Metric
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from metallo.operations.metrics import (
    START_BUCKETS,
    AsyncCollector,
    bucketed_seconds_sql,
    histogram_from_row,
    labelled_gauge,
)

_BY_PHASE = text("SELECT phase, count(*) FROM runs GROUP BY phase ORDER BY phase")
# accepted_at: LaunchRun accepted; started_at: the Site accepted the first native start.
_TO_START = text(f"""SELECT {bucketed_seconds_sql(
    "extract(epoch FROM started_at - accepted_at)", START_BUCKETS)}
    FROM runs WHERE started_at IS NOT NULL""")


def run_metrics(engine: AsyncEngine) -> AsyncCollector:
    """``metallo_runs{phase}`` and ``metallo_run_launch_to_native_start_seconds``."""
    async def collect() -> list[Metric]:
        async with engine.connect() as connection:
            phases = [(row[0], row[1]) for row in await connection.execute(_BY_PHASE)]
            started = (await connection.execute(_TO_START)).one()
        return [
            labelled_gauge("metallo_runs", "Runs by phase (terminal ones included)", "phase",
                           phases),
            histogram_from_row("metallo_run_launch_to_native_start_seconds",
                               "From LaunchRun accepted to the Site's accepted native start, "
                               "per started Run", started, START_BUCKETS),
        ]
    return collect
