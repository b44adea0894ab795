"""Execution Core's database metrics, read at scrape time (docs/operators.md, Metrics):
Runs by phase, the launch → native start latency of every started Run and the native
end → Run completed latency of every ended Run whose Site noticed its native end."""

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
# The Run's last Attempt's native end notice (ADR 0016: the Site Runtime saw the native
# work end) → the Run ended (its RunCompleted written).
_END_TO_COMPLETED = text(f"""SELECT {bucketed_seconds_sql(
    "greatest(0, extract(epoch FROM ended - noticed))", START_BUCKETS)}
    FROM (SELECT DISTINCT ON (r.run_id) r.ended_at AS ended, a.native_end_noticed_at AS noticed
          FROM runs r JOIN attempts a ON a.run_id = r.run_id
          WHERE r.phase = 'terminal' AND r.ended_at IS NOT NULL
          ORDER BY r.run_id, a.number DESC) last
    WHERE noticed IS NOT NULL""")


def run_metrics(engine: AsyncEngine) -> AsyncCollector:
    """``metallo_runs{phase}``, ``metallo_run_launch_to_native_start_seconds`` and
    ``metallo_run_native_end_to_completed_seconds``."""
    async def collect() -> list[Metric]:
        async with engine.connect() as connection:
            phases = [(row[0], row[1]) for row in await connection.execute(_BY_PHASE)]
            started = (await connection.execute(_TO_START)).one()
            completed = (await connection.execute(_END_TO_COMPLETED)).one()
        return [
            labelled_gauge("metallo_runs", "Runs by phase (terminal ones included)", "phase",
                           phases),
            histogram_from_row("metallo_run_launch_to_native_start_seconds",
                               "From LaunchRun accepted to the Site's accepted native start, "
                               "per started Run", started, START_BUCKETS),
            histogram_from_row("metallo_run_native_end_to_completed_seconds",
                               "From the Site's native end notice of a Run's last Attempt to "
                               "the Run completed, per ended Run with a notice", completed,
                               START_BUCKETS),
        ]
    return collect
