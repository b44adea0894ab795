"""Run Execution Core: ``python -m execution_core`` (DESIGN.md; docs/runs.md, Operating).

Environment:

- ``METALLO_EXECUTION_CORE_DATABASE_URL`` or ``METALLO_POSTGRES_URL`` — PostgreSQL
  (database ``metallo_execution_core``; migrated to head at start);
- ``METALLO_AMQP_URL`` — RabbitMQ (default ``amqp://guest:guest@127.0.0.1:5672/``);
- ``METALLO_GOVERNANCE_FILE`` — the governance file (default ``examples/governance.yaml``);
- ``METALLO_TOPOLOGY_PREFIX`` — optional prefix of exchange and queue names;
- ``METALLO_EXECUTION_CORE_*`` — timing (see ``application/settings.py``).

Starts the CommandServer (LaunchRun, CancelRun, ReadRunLog, GetRun, ListRuns,
GetRunLogRead), the EventConsumer (Site command results, log read answers), the
OutboxRelay, the launch worker and the Run Supervisor, and stops them cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from execution_core.adaptors.governance_authority import GovernanceAuthority
from execution_core.adaptors.metrics import run_metrics
from execution_core.adaptors.service import ExecutionCore
from execution_core.application.settings import Settings
from metallo.governance import GovernanceFile
from metallo.log_setup import configure_logging
from metallo.messaging import Topology
from metallo.messaging.broker import amqp_url_from_environment
from metallo.operations.metrics import outbox_collector
from metallo.operations.readiness import service_readiness
from metallo.operations.server import OpsServer
from metallo.persistence.engine import create_engine, database_url
from metallo.persistence.migrations import migrate

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


async def main() -> None:
    """Migrate, start every part, wait for a stop signal, stop."""
    configure_logging()
    url = database_url("execution_core")
    await migrate(url, MIGRATIONS)
    engine = create_engine(url)
    service = ExecutionCore(
        engine=engine,
        amqp_url=amqp_url_from_environment(),
        topology=Topology(prefix=os.environ.get("METALLO_TOPOLOGY_PREFIX", "")),
        authority=GovernanceAuthority(
            GovernanceFile(os.environ.get("METALLO_GOVERNANCE_FILE", "examples/governance.yaml"))
        ),
        settings=Settings.from_env(),
    )
    ops = OpsServer("execution_core", service_readiness(engine, MIGRATIONS, lambda: [
        *service.server.queue_consumers, *service.consumer.queue_consumers]),
        collectors=[outbox_collector("execution_core", engine), run_metrics(engine)])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await ops.start()
    await service.start()
    logging.getLogger("execution_core").info("Execution Core started")
    try:
        await stop.wait()
    finally:
        await service.stop()
        await ops.stop()
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
