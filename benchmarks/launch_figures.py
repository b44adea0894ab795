"""Figures of benchmarks/launch.py that read the stack rather than drive it: the
Site stream's share from the Runtime's delivery journal, percentiles, the raw
broker round trip and the ``RunCompleted`` watcher (the Go API's live-update
bridge stands in the same way)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import time
import uuid
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import aio_pika

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Topology
from metallo.messaging.topology import event_routing_key


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def site_stream(journal: Path, run_ids: set[str], wall_seconds: float) -> dict | None:
    """The Site stream's share of the benchmark, from the Runtime's ``delivery.sqlite``
    (opened read only): commands per Run, p50 milliseconds from journaled to
    acknowledged per command kind, the fraction of ``wall_seconds`` the stream spent
    handling them, and the Run rate that serial handling alone allows. None when the
    journal is absent or holds none of ``run_ids``."""
    if not journal.exists() or not run_ids:
        return None
    connection = sqlite3.connect(f"{journal.as_uri()}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "SELECT command_json, journaled_at, acknowledged_at FROM commands"
            " WHERE acknowledged_at IS NOT NULL").fetchall()
    finally:
        connection.close()
    by_kind: dict[str, list[float]] = defaultdict(list)
    for command_json, journaled, acknowledged in rows:
        command = json.loads(command_json)
        if command.get("run_id") in run_ids:
            seconds = (_instant(acknowledged) - _instant(journaled)).total_seconds()
            by_kind[command["kind"]].append(seconds)
    handled = [s for values in by_kind.values() for s in values]
    if not handled:
        return None
    per_run = sum(handled) / len(run_ids)
    return {
        "commands_per_run": round(len(handled) / len(run_ids), 2),
        "p50_ms": {k: round(1000 * statistics.median(v), 1) for k, v in sorted(by_kind.items())},
        "busy_fraction": round(sum(handled) / wall_seconds, 3) if wall_seconds else None,
        "serial_bound_runs_per_second": round(1 / per_run, 2) if per_run else None,
    }


def rounded(value: float | None) -> float | None:
    """``value`` to 3 decimals; None stays None."""
    return None if value is None else round(value, 3)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def broker_round_trips(amqp_url: str, count: int, queue_name: str) -> list[float]:
    """Seconds for ``count`` publish → consume round trips through the exclusive queue
    ``queue_name`` (one the login of ``amqp_url`` may declare, read and publish to
    through the default exchange)."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue(queue_name, exclusive=True, auto_delete=True)
        arrived: asyncio.Queue = asyncio.Queue()
        await queue.consume(lambda m: arrived.put_nowait(m), no_ack=True)
        times = []
        for _ in range(count):
            start = time.perf_counter()
            await channel.default_exchange.publish(aio_pika.Message(b"x"), routing_key=queue.name)
            await arrived.get()
            times.append(time.perf_counter() - start)
        return times


async def watch_completions(amqp_url: str, topology: Topology, on_completed) -> aio_pika.abc.AbstractConnection:
    """Bind an exclusive queue to ``RunCompleted`` events, as the Go API's live-update
    bridge does (as the Go API's user: ``api_notifications.*`` is its bridge's name),
    and call ``on_completed(event)`` for each; return the connection."""
    connection = await aio_pika.connect(amqp_url)
    channel = await connection.channel()
    exchange = await channel.declare_exchange(topology.events_exchange, aio_pika.ExchangeType.TOPIC,
                                              durable=True)
    queue = await channel.declare_queue(
        f"{topology.prefix}api_notifications.bench-{uuid.uuid4().hex[:8]}",
        exclusive=True, auto_delete=True)
    await queue.bind(exchange, routing_key=event_routing_key(ec.RunCompleted))

    def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        event = ec.RunCompleted()
        event.ParseFromString(message.body)
        on_completed(event)

    await queue.consume(on_message, no_ack=True)
    return connection
