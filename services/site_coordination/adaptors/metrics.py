"""Site Coordination's database metrics, read at scrape time (docs/operators.md,
Metrics): each Site's stream depth and oldest pending command, deferrals by code."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from metallo.operations.metrics import AsyncCollector

_PENDING = text("""
    SELECT site_id, count(*) AS depth,
           extract(epoch FROM now() - min(appended_at)) AS oldest
    FROM site_commands WHERE result_recorded_at IS NULL
    GROUP BY site_id ORDER BY site_id""")
_SITES = text("SELECT DISTINCT site_id FROM site_streams ORDER BY site_id")
_DEFERRALS = text("SELECT code, count(*) FROM progress_reports GROUP BY code ORDER BY code")


def site_metrics(engine: AsyncEngine) -> AsyncCollector:
    """``metallo_site_stream_depth{site}``, ``metallo_site_stream_oldest_pending_seconds{site}``
    (0 for a Site with nothing pending) and ``metallo_site_deferrals_total{code}``."""
    async def collect() -> list[Metric]:
        async with engine.connect() as connection:
            sites = [row[0] for row in await connection.execute(_SITES)]
            pending = {row.site_id: row for row in await connection.execute(_PENDING)}
            deferrals = [(row[0], row[1]) for row in await connection.execute(_DEFERRALS)]
        depth = GaugeMetricFamily("metallo_site_stream_depth",
                                  "Commands appended to a Site's streams without a result yet",
                                  labels=["site"])
        oldest = GaugeMetricFamily("metallo_site_stream_oldest_pending_seconds",
                                   "Age of a Site's oldest command without a result",
                                   labels=["site"])
        for site in sorted(set(sites) | set(pending)):
            row = pending.get(site)
            depth.add_metric([site], row.depth if row else 0)
            oldest.add_metric([site], float(row.oldest) if row else 0.0)
        deferred = CounterMetricFamily("metallo_site_deferrals",
                                       "Deferrals reported by Site Runtimes, by stable code",
                                       labels=["code"])
        for code, count in deferrals:
            deferred.add_metric([code], count)
        return [depth, oldest, deferred]
    return collect
