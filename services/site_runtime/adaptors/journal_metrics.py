"""The sizes of the Runtime's SQLite journals (docs/operators.md, Metrics), read at each
scrape: ``metallo_journal_bytes{journal}`` (the file with its write-ahead log) and
``metallo_journal_rows{journal, table}``. ``journal`` is the file's stem (``delivery``,
``jobs``, ``services``…), ``table`` one of its tables: both fixed by the code."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from metallo.operations.metrics import AsyncCollector

#: A journal busy with a write waits this long for its read lock, then is skipped.
READ_TIMEOUT_SECONDS = 2.0


def journal_sizes(state: Path) -> tuple[list[tuple[str, float]], list[tuple[str, str, float]]]:
    """``([(journal, bytes)], [(journal, table, rows)])`` of every ``*.sqlite`` directly in
    ``state``, opened read only (never created, never written). A journal that cannot be
    read keeps its bytes and reports no rows."""
    sizes, rows = [], []
    for path in sorted(state.glob("*.sqlite")):
        name = path.stem
        files = [path, path.with_name(path.name + "-wal")]
        sizes.append((name, float(sum(f.stat().st_size for f in files if f.exists()))))
        try:
            connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True,
                                         timeout=READ_TIMEOUT_SECONDS)
        except sqlite3.Error:
            continue
        try:
            tables = [t for (t,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            for table in tables:
                (count,) = connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()
                rows.append((name, table, float(count)))
        except sqlite3.Error:
            pass
        finally:
            connection.close()
    return sizes, rows


def journal_metrics(state: Path) -> AsyncCollector:
    """The collector of :func:`journal_sizes` for the Runtime's state directory."""
    async def collect() -> list[Metric]:
        sizes, rows = await asyncio.to_thread(journal_sizes, state)
        size = GaugeMetricFamily("metallo_journal_bytes",
                                 "Bytes of a Site Runtime journal (with its write-ahead log)",
                                 labels=["journal"])
        for name, value in sizes:
            size.add_metric([name], value)
        count = GaugeMetricFamily("metallo_journal_rows", "Rows of a Site Runtime journal's table",
                                  labels=["journal", "table"])
        for name, table, value in rows:
            count.add_metric([name, table], value)
        return [size, count]
    return collect
