"""Prometheus metrics of the platform (docs/operators.md, Metrics lists every one).

Two kinds:

- process metrics, counted where the work happens (requests served, deliveries
  retried or dead-lettered, native requests): module-level objects in the
  default registry, served by the process's :class:`OpsServer`;
- database metrics, read at scrape time from the owner's own tables (outbox
  backlog, Runs by phase, Site streams, deferrals, launch → native start): an
  :data:`AsyncCollector` returns metric families, so every replica reports the
  same truth and nothing is lost at a restart.

Labels are bounded: service, message type, kind, outcome, stable codes, queue,
Site, phase, native target — never a Run id, member, URL or free text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

AsyncCollector = Callable[[], Awaitable[list[Metric]]]

#: Seconds: a command or query handled, a native request answered.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Seconds from LaunchRun accepted to the Site's accepted native start.
START_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)

REQUESTS = Counter(
    "metallo_requests", "Commands and queries handled, by outcome (accepted, rejected, failed) "
    "and rejection code", ["service", "kind", "message", "outcome", "code"])
REQUEST_SECONDS = Histogram(
    "metallo_request_seconds", "Time to handle one command or query, reply queued",
    ["service", "kind", "message"], buckets=LATENCY_BUCKETS)
REDELIVERED = Counter(
    "metallo_deliveries_redelivered", "Deliveries RabbitMQ marked redelivered (a consumer "
    "died or a channel closed before the ack); the inbox absorbs repeats", ["queue"])
RETRIED = Counter(
    "metallo_deliveries_retried", "Deliveries whose handler failed, sent to Q.retry", ["queue"])
DEAD_LETTERED = Counter(
    "metallo_deliveries_dead_lettered", "Deliveries parked in Q.dlq (poison or out of tries)",
    ["queue"])
NATIVE_REQUEST_SECONDS = Histogram(
    "metallo_native_request_seconds", "Requests to a native or Site system (slurmrestd, the "
    "Site edge, the Kubernetes API, git over HTTPS)", ["target", "method"],
    buckets=LATENCY_BUCKETS)
NATIVE_REQUEST_ERRORS = Counter(
    "metallo_native_request_errors", "Native requests that failed: no answer, or HTTP 5xx",
    ["target", "method"])


def record_request(service: str, kind: str, message: str, seconds: float, outcome: str,
                   code: str = "") -> None:
    """Count one handled command or query (``kind`` command|query, ``outcome``
    accepted|rejected|failed, ``code`` the rejection's stable code) and its time."""
    REQUESTS.labels(service, kind, message, outcome, code).inc()
    REQUEST_SECONDS.labels(service, kind, message).observe(seconds)


def outbox_collector(service: str, engine: AsyncEngine) -> AsyncCollector:
    """``metallo_outbox_backlog`` (rows not yet published) and
    ``metallo_outbox_oldest_seconds`` (age of the oldest one; 0 when none), plus
    ``metallo_outbox_dead`` (rows the relay gave up on) for ``service``."""
    query = text("""
        SELECT count(*) FILTER (WHERE d.state = 'pending') AS pending,
               count(*) FILTER (WHERE d.state = 'dead') AS dead,
               coalesce(extract(epoch FROM now() - min(m.created_at)
                        FILTER (WHERE d.state = 'pending')), 0) AS oldest
        FROM outbox_dispatch d JOIN outbox_messages m ON m.id = d.message_pk
        WHERE d.state IN ('pending', 'dead')""")

    async def collect() -> list[Metric]:
        async with engine.connect() as connection:
            row = (await connection.execute(query)).one()
        return [gauge("metallo_outbox_backlog", "Outbox rows not yet published", service,
                      row.pending),
                gauge("metallo_outbox_oldest_seconds", "Age of the oldest unpublished outbox row",
                      service, float(row.oldest)),
                gauge("metallo_outbox_dead", "Outbox rows the relay stopped retrying", service,
                      row.dead)]
    return collect


def gauge(name: str, documentation: str, service: str, value: float) -> GaugeMetricFamily:
    """A one-sample gauge labelled with ``service``."""
    family = GaugeMetricFamily(name, documentation, labels=["service"])
    family.add_metric([service], value)
    return family


def labelled_gauge(name: str, documentation: str, label: str,
                   rows: Sequence[tuple[str, float]]) -> GaugeMetricFamily:
    """A gauge with one sample per ``(label value, value)`` row."""
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in rows:
        family.add_metric([key], value)
    return family


def bucketed_seconds_sql(seconds: str, buckets: Sequence[float]) -> str:
    """SELECT list counting ``seconds`` (an SQL expression) at or under each bucket,
    then its sum and count: the columns :func:`histogram_from_row` reads."""
    parts = [f"count(*) FILTER (WHERE {seconds} <= {float(b)!r}) AS b{i}"
             for i, b in enumerate(buckets)]
    return ", ".join([*parts, f"coalesce(sum({seconds}), 0) AS total", "count(*) AS n"])


def histogram_from_row(name: str, documentation: str, row, buckets: Sequence[float]
                       ) -> HistogramMetricFamily:
    """A histogram family from a row selected with :func:`bucketed_seconds_sql`."""
    cumulative = [(repr(float(b)), int(row[i])) for i, b in enumerate(buckets)]
    cumulative.append(("+Inf", int(row[len(buckets) + 1])))
    return HistogramMetricFamily(name, documentation, buckets=cumulative,
                                 sum_value=float(row[len(buckets)]))
