"""The Runtime's native requests measured (docs/operators.md, Metrics): the Site edge
(``target="site_edge"``) and, with the slurm executor, slurmrestd (``"slurmrestd"``)."""

from __future__ import annotations

from metallo.operations.http_metrics import measure_client
from site_runtime.adaptors.edge.client import EdgeClient


def measure_native_requests(edge: EdgeClient, executor: object) -> None:
    """Wrap the edge client's and (when present) the slurmrestd client's transports."""
    measure_client(edge._client, "site_edge")  # noqa: SLF001
    rest = getattr(executor, "rest", None)
    http = getattr(rest, "_http", None)
    if callable(http):  # SlurmRest builds its client on first use; build it now
        measure_client(http(), "slurmrestd")
