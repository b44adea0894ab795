"""``python -m metallo.devstack supervise`` — the detached supervisor started by
``metallo dev up`` (preparation already done by the caller)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from metallo.devstack.components import Options, plan
from metallo.devstack.layout import Layout
from metallo.devstack.operator import runtime_grant_hooks
from metallo.devstack.supervisor import Supervisor


def main(argv: list[str] | None = None) -> int:
    """Run ``supervise``, ``report`` or ``compose-setup``; return the exit status.

    ``supervise`` runs the prepared stack until SIGTERM/SIGINT; ``report`` prints a
    Pipeline's demo summary (a CLI error's exit code on failure).
    """
    parser = argparse.ArgumentParser(prog="python -m metallo.devstack")
    sub = parser.add_subparsers(dest="command", required=True)
    sup = sub.add_parser("supervise", help="run the prepared stack until SIGTERM")
    sup.add_argument("--executor", choices=("local", "slurm"), required=True)
    sup.add_argument("--edge-port", type=int, default=8443)
    sup.add_argument("--ca-file", required=True)
    sup.add_argument("--kubernetes", action="store_true",
                     help="also run the lab-k8s Site Runtime on the Kubernetes lab")
    sup.add_argument("--replicas", type=int, default=1, help="processes of each service")
    rep = sub.add_parser("report", help="the demo summary of a Pipeline (one JSON line)")
    rep.add_argument("pipeline_id")
    rep.add_argument("--executor", choices=("local", "slurm"), required=True)
    setup = sub.add_parser("compose-setup", help="prepare the docker compose stack's volume")
    setup.add_argument("--dir", required=True, help="the shared state volume")
    setup.add_argument("--edge-host", default="site-coordination")
    setup.add_argument("--site", default="lab-slurm")
    grant = sub.add_parser("compose-grant", help="the compose stack's runtime grant (once "
                           "Site Coordination serves)")
    grant.add_argument("--dir", required=True, help="the shared state volume")
    grant.add_argument("--site", default="lab-slurm")
    broker = sub.add_parser("compose-broker", help="the compose stack's RabbitMQ users and "
                            "the broker's definitions file (before RabbitMQ starts)")
    broker.add_argument("--dir", required=True, help="the shared state volume")
    broker.add_argument("--definitions", required=True, help="the broker's definitions file")
    args = parser.parse_args(argv)
    import os

    if args.command == "compose-broker":
        from metallo.devstack.compose import give_to_services
        from metallo.devstack.compose_broker import make_principals

        users = make_principals(args.dir, args.definitions)
        give_to_services(Layout(Path(args.dir)))
        print(f"RabbitMQ users: {', '.join(users)}")
        return 0

    if args.command == "compose-setup":
        from metallo.devstack.compose import setup as compose_setup

        return asyncio.run(compose_setup(args.dir, args.edge_host, args.site))
    if args.command == "compose-grant":
        from metallo.devstack.compose import grant as compose_grant

        return asyncio.run(compose_grant(args.dir, args.site))

    if args.command == "report":
        from metallo.cli.exits import CliError
        from metallo.cli.render import print_error
        from metallo.devstack.report import main as report

        try:
            return report(args.pipeline_id, args.executor)
        except CliError as error:
            print_error(error)
            return int(error.exit_code)

    layout = Layout.default()
    options = Options(executor=args.executor, edge_port=args.edge_port,
                      amqp_url=os.environ.get("METALLO_DEV_AMQP_URL", Options.amqp_url),
                      topology_prefix=os.environ.get("METALLO_TOPOLOGY_PREFIX", ""),
                      kubernetes=args.kubernetes, replicas=args.replicas)
    components, missing = plan(layout, options)
    before_start, after_stop = runtime_grant_hooks(layout, options)
    supervisor = Supervisor(layout, options, components, missing, {"ca_file": args.ca_file},
                            echo=False, before_start=before_start, after_stop=after_stop)
    return asyncio.run(supervisor.run())


if __name__ == "__main__":
    sys.exit(main())
