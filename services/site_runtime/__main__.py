"""Run one Site Runtime worker (docs/site-runtime.md, Running it).

    python -m site_runtime --edge https://127.0.0.1:8443 --ca FILE --grant-file FILE \\
        --executor local|slurm|kubernetes --state-dir DIR

Every option has an environment equivalent:
``SITE_API_URL``, ``SITE_API_CA_FILE``, ``SITE_API_CREDENTIAL_FILE`` (or the grant
itself in ``SITE_API_CREDENTIAL``), ``RUNTIME_EXECUTOR``, ``RUNTIME_STATE_DIRECTORY``,
``RUNTIME_WORKSPACE_ROOT``. Local executor settings: ``RUNTIME_LOCAL_MAX_WALL_SECONDS``,
``RUNTIME_LOCAL_GRACE_SECONDS``, ``RUNTIME_LOCAL_STAGING_SECONDS``,
``RUNTIME_LOCAL_MAX_ACTIVE``, ``RUNTIME_LOCAL_RELEASE_SECONDS``, ``REPOSITORY_CA_FILE``.
``METALLO_OPS_ADDRESS``: ``/healthz``, ``/readyz`` and ``/metrics`` (default
``127.0.0.1:0``; docs/operators.md, Probes and metrics).

Each executor comes from its package's factory (``adaptors/local/factory.py``,
``adaptors/slurm/factory.py``); the slurm package is imported only with
``--executor slurm`` and reads its own ``SLURM_*`` settings; the kubernetes package
(``adaptors/kubernetes/factory.py``, lightkube) only with ``--executor kubernetes``
and reads ``KUBERNETES_*`` (``--kubeconfig`` overrides ``KUBERNETES_KUBECONFIG``). SIGTERM/SIGINT
stop the worker gracefully (the command in hand finishes; stage processes and
Slurm jobs keep running and are re-adopted at the next start).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from metallo.log_setup import configure_logging
from metallo.operations.readiness import Readiness, started_check
from metallo.operations.server import OpsServer
from site_runtime.adaptors.delivery_journal import SqliteDeliveryJournal
from site_runtime.adaptors.edge.client import EdgeClient, EdgeSettings
from site_runtime.adaptors.journal_metrics import journal_metrics
from site_runtime.adaptors.native_metrics import measure_native_requests
from site_runtime.application.delivery import JournalMismatch
from site_runtime.application.ports import Closing, Supervising
from site_runtime.application.worker import Worker, WorkerSettings

log = logging.getLogger("site_runtime")


class SettingsError(ValueError):
    """A setting is missing or malformed; the Runtime does not start."""


def parse_args(argv: list[str], env: Mapping[str, str]) -> argparse.Namespace:
    """Options, defaulted from the environment; raise SettingsError when incomplete."""
    p = argparse.ArgumentParser(prog="python -m site_runtime", description=__doc__.split("\n")[0])
    p.add_argument("--edge", default=env.get("SITE_API_URL"), help="Site edge URL (https://)")
    p.add_argument("--ca", default=env.get("SITE_API_CA_FILE"), help="CA file of the edge")
    p.add_argument(
        "--grant-file",
        default=env.get("SITE_API_CREDENTIAL_FILE"),
        help="file holding the psb_ command grant (read on every request)",
    )
    p.add_argument(
        "--executor",
        default=env.get("RUNTIME_EXECUTOR", "local"),
        choices=["local", "slurm", "kubernetes"],
    )
    p.add_argument(
        "--state-dir",
        default=env.get("RUNTIME_STATE_DIRECTORY"),
        help="directory of delivery.sqlite and jobs.sqlite",
    )
    p.add_argument(
        "--workspace-root",
        default=env.get("RUNTIME_WORKSPACE_ROOT"),
        help="local executor: root of the private Attempt workspaces "
        "(default STATE_DIR/workspaces)",
    )
    p.add_argument(
        "--kubeconfig",
        default=env.get("KUBERNETES_KUBECONFIG"),
        help="kubernetes executor: kubeconfig of the Runtime's own identity (or in-cluster)",
    )
    p.add_argument("--wait", type=float, default=20.0, help="long-poll wait in seconds (0..30)")
    p.add_argument("--log-level", default=env.get("RUNTIME_LOG_LEVEL", "INFO"))
    args = p.parse_args(argv)
    if not args.edge:
        raise SettingsError("--edge or SITE_API_URL is required")
    if not args.state_dir:
        raise SettingsError("--state-dir or RUNTIME_STATE_DIRECTORY is required")
    if not args.grant_file and not env.get("SITE_API_CREDENTIAL"):
        raise SettingsError(
            "--grant-file, SITE_API_CREDENTIAL_FILE or SITE_API_CREDENTIAL is required"
        )
    if not 0 <= args.wait <= 30:
        raise SettingsError("--wait must be between 0 and 30 seconds")
    return args


def build_executor(args: argparse.Namespace, env: Mapping[str, str], edge: EdgeClient):
    """The executor ``--executor`` names, from its own package's factory (the slurm
    package is imported only when chosen). Raises SettingsError for a bad setting."""
    ca_file = Path(args.ca) if args.ca else None
    state = Path(args.state_dir)
    if args.executor == "local":
        from site_runtime.adaptors.local import factory as local

        try:
            return local.build_executor(
                env=env,
                edge=edge,
                ca_file=ca_file,
                state_directory=state,
                workspace_root=Path(args.workspace_root) if args.workspace_root else None,
            )
        except local.SettingsError as error:
            raise SettingsError(str(error)) from None
    if args.executor == "kubernetes":
        from site_runtime.adaptors.kubernetes import factory as kubernetes

        try:
            return kubernetes.build_executor(
                env=env, edge=edge, state_directory=state, kubeconfig=args.kubeconfig
            )
        except kubernetes.SettingsError as error:  # malformed KUBERNETES_* value: exit status 2
            raise SettingsError(f"kubernetes executor: {error}") from None
    from site_runtime.adaptors.slurm import factory as slurm

    try:
        return slurm.build_executor(env=env, edge=edge, ca_file=ca_file, state_directory=state)
    except slurm.SettingsError as error:  # malformed SLURM_* value: exit status 2
        raise SettingsError(f"slurm executor: {error}") from None


async def serve(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Run the worker until SIGTERM/SIGINT; return the process exit status."""
    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    edge = EdgeClient(
        EdgeSettings(
            base_url=args.edge,
            ca_file=Path(args.ca) if args.ca else None,
            credential_file=Path(args.grant_file) if args.grant_file else None,
            credential=None if args.grant_file else env.get("SITE_API_CREDENTIAL"),
        )
    )
    try:
        executor = build_executor(args, env, edge)
    except SettingsError:
        await edge.close()
        raise
    measure_native_requests(edge, executor)
    journal = SqliteDeliveryJournal(state / "delivery.sqlite")
    worker = Worker(edge, journal, executor, WorkerSettings(wait_seconds=args.wait))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started = asyncio.Event()
    ops = OpsServer("site_runtime", Readiness({"worker": started_check(
        started, "the worker has not started (supervision or journal recovery under way)")}),
        collectors=[journal_metrics(state)])
    await ops.start()
    if isinstance(executor, Supervising):
        await executor.start_supervision()
    log.info(
        "Site Runtime started: edge %s, executor %s, state %s", args.edge, args.executor, state
    )
    status = 0
    started.set()
    try:
        await worker.run(stop)
    except JournalMismatch as error:
        log.error("stopping: %s (see docs/site-runtime.md, Recovery)", error)
        status = 3
    finally:
        if isinstance(executor, Supervising):
            await executor.stop_supervision()
        if isinstance(executor, Closing):
            result = executor.close()
            if asyncio.iscoroutine(result):
                await result
        await edge.close()
        journal.close()
        await ops.stop()
    log.info("Site Runtime stopped")
    return status


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Entry point; exit status 2 for bad settings, 3 for a journal mismatch."""
    env = os.environ if env is None else env
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, env)
    except SettingsError as error:
        print(f"site_runtime: {error}", file=sys.stderr)
        return 2
    try:
        configure_logging(args.log_level)
    except ValueError as error:
        print(f"site_runtime: {error}", file=sys.stderr)
        return 2
    # httpx logs each request line at INFO; URLs carry no secret, but keep the log quiet.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        return asyncio.run(serve(args, env))
    except SettingsError as error:
        print(f"site_runtime: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
