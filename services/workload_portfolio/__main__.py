"""``python -m workload_portfolio`` — wiring of the Workload Portfolio.

- ``serve`` (default): migrate the database, then run the CommandServer
  (PrepareAction, PrepareBranch, GetWorkloadRevision, ListWorkloads,
  ListBranches) and the
  OutboxRelay until SIGTERM/SIGINT. Settings: ``adaptors/settings.py``.
- ``migrate``: only the migrations.
- ``check FILE``: validate an actions.yaml locally and print every problem.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from metallo.log_setup import configure_logging

MIGRATIONS = Path(__file__).resolve().parent / "migrations"

log = logging.getLogger("workload_portfolio")


async def serve() -> None:
    """Run the service until a termination signal."""
    from metallo.governance import GovernanceFile
    from metallo.messaging import OutboxRelay, Topology
    from metallo.operations.metrics import outbox_collector
    from metallo.operations.readiness import service_readiness
    from metallo.operations.server import OpsServer
    from metallo.persistence.engine import create_engine
    from metallo.persistence.migrations import migrate
    from workload_portfolio.adaptors.command_handlers import PortfolioCommandServer
    from workload_portfolio.adaptors.git_source import GitSourceControl
    from workload_portfolio.adaptors.governance_authority import GovernanceProjectAuthority
    from workload_portfolio.adaptors.settings import Settings
    from workload_portfolio.application.preparation import Preparation

    settings = Settings.from_environment()
    await migrate(settings.database_url, MIGRATIONS)
    engine = create_engine(settings.database_url)
    topology = Topology(prefix=settings.topology_prefix)
    authority = GovernanceProjectAuthority(GovernanceFile(settings.governance_file))
    source = GitSourceControl(policy=settings.repository_policy,
                              timeout_seconds=settings.git_timeout_seconds,
                              credentials=settings.git_credentials, ca_file=settings.git_ca_file)
    server = PortfolioCommandServer(engine, settings.amqp_url, topology,
                                    preparation=Preparation(source, authority,
                                                            settings.environment_policy,
                                                            settings.repository_policy),
                                    authority=authority)
    relay = OutboxRelay(engine, settings.amqp_url, topology, owner="workload_portfolio")
    ops = OpsServer("workload_portfolio",
                    service_readiness(engine, MIGRATIONS, lambda: server.queue_consumers),
                    collectors=[outbox_collector("workload_portfolio", engine)])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await ops.start()
    await relay.start()
    await server.start()
    log.info("workload_portfolio serving (governance file %s)", settings.governance_file)
    try:
        await stop.wait()
    finally:
        await server.stop()
        await relay.stop()
        await ops.stop()
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    """Run ``serve`` (default), ``migrate`` or ``check FILE``; return the exit status.

    ``check`` prints the actions of an ``actions.yaml`` (1: invalid); 2: bad usage.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    configure_logging()
    command = args[0] if args else "serve"
    if command == "serve":
        asyncio.run(serve())
        return 0
    if command == "migrate":
        from metallo.persistence.migrations import migrate
        from workload_portfolio.adaptors.settings import Settings

        asyncio.run(migrate(Settings.from_environment().database_url, MIGRATIONS))
        return 0
    if command == "check" and len(args) == 2:
        from metallo.environment_policy import EnvironmentPolicy
        from workload_portfolio.application.actions_file import ActionsFileError, parse_actions_file

        try:
            data = Path(args[1]).read_bytes()
        except OSError as e:
            print(f"{args[1]}: cannot read the file ({e.strerror})", file=sys.stderr)
            return 2
        try:
            parsed = parse_actions_file(data, source=args[1],
                                        environment=EnvironmentPolicy.from_environment())
        except ActionsFileError as e:
            print(e, file=sys.stderr)
            return 1
        print(f"{args[1]}: {len(parsed.actions)} action(s): {', '.join(parsed.names)}")
        return 0
    print("usage: python -m workload_portfolio [serve | migrate | check FILE]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
