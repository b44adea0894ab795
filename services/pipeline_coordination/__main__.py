"""Run Pipeline Coordination: ``python -m pipeline_coordination [serve | migrate]``.

``serve`` (default) migrates the database, then runs the CommandServer
(StartPipeline, StopPipeline, GetPipeline, ListPipelines), the EventConsumer
(Execution Core's RunCompleted), the OutboxRelay (replies, PipelineCompleted)
and the coordinator, which talks to Workload Portfolio and Execution Core
through a RequestClient, until SIGINT/SIGTERM.

Environment (``application/settings.py`` has the table):

- ``METALLO_PIPELINE_COORDINATION_DATABASE_URL`` or ``METALLO_POSTGRES_URL`` —
  PostgreSQL (database ``metallo_pipeline_coordination``);
- ``METALLO_AMQP_URL`` — RabbitMQ (default ``amqp://guest:guest@127.0.0.1:5672/``);
- ``METALLO_GOVERNANCE_FILE`` — the governance file (default ``examples/governance.yaml``);
- ``METALLO_TOPOLOGY_PREFIX`` — optional prefix of exchange and queue names;
- ``METALLO_PIPELINE_COORDINATION_<FIELD>`` — coordinator timing (seconds);
- ``METALLO_GIT_HOSTS``, ``METALLO_LOCAL_REPOSITORIES``, ``METALLO_STATE_DIRS`` — the
  repository policy StartPipeline checks (``metallo.repository_policy``);
- ``METALLO_LOG_LEVEL`` — logging level (default INFO).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from metallo.log_setup import configure_logging

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
ROOT = Path(__file__).resolve().parents[2]


async def serve() -> None:
    """Migrate, start every part, wait for a stop signal, stop."""
    from metallo.governance import GovernanceFile
    from metallo.messaging import Topology
    from metallo.messaging.broker import amqp_url_from_environment
    from metallo.operations.metrics import outbox_collector
    from metallo.operations.readiness import service_readiness
    from metallo.operations.server import OpsServer
    from metallo.persistence.engine import create_engine, database_url
    from metallo.persistence.migrations import migrate
    from metallo.repository_policy import RepositoryPolicy
    from pipeline_coordination.adaptors.governance_authority import GovernanceAuthority
    from pipeline_coordination.adaptors.service import PipelineCoordination
    from pipeline_coordination.application.settings import Settings

    url = database_url("pipeline_coordination")
    await migrate(url, MIGRATIONS)
    engine = create_engine(url)
    service = PipelineCoordination(
        engine=engine,
        amqp_url=amqp_url_from_environment(),
        topology=Topology(prefix=os.environ.get("METALLO_TOPOLOGY_PREFIX", "")),
        authority=GovernanceAuthority(
            GovernanceFile(os.environ.get("METALLO_GOVERNANCE_FILE", str(ROOT / "examples" / "governance.yaml")))
        ),
        settings=Settings.from_env(),
        repository_policy=RepositoryPolicy.from_environment(),
    )
    ops = OpsServer("pipeline_coordination", service_readiness(engine, MIGRATIONS, lambda: [
        *service.server.queue_consumers, *service.consumer.queue_consumers]),
        collectors=[outbox_collector("pipeline_coordination", engine)])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await ops.start()
    await service.start()
    logging.getLogger("pipeline_coordination").info("Pipeline Coordination started")
    try:
        await stop.wait()
    finally:
        await service.stop()
        await ops.stop()
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    """Run ``serve`` (default) or ``migrate``; return the exit status (2: unknown command)."""
    args = list(sys.argv[1:] if argv is None else argv)
    configure_logging()
    command = args[0] if args else "serve"
    if command == "serve":
        asyncio.run(serve())
        return 0
    if command == "migrate":
        from metallo.persistence.engine import database_url
        from metallo.persistence.migrations import migrate

        asyncio.run(migrate(database_url("pipeline_coordination"), MIGRATIONS))
        return 0
    print("usage: python -m pipeline_coordination [serve | migrate]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
