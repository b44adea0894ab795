"""Run one Site Runtime worker (DESIGN.md, Site Runtime; docs/site-runtime.md).

    python -m site_runtime --edge https://127.0.0.1:8443 --ca FILE --grant-file FILE \\
        --executor local|slurm|kubernetes --state-dir DIR

Every option has an environment equivalent (seed 000 composition names):
``SITE_API_URL``, ``SITE_API_CA_FILE``, ``SITE_API_CREDENTIAL_FILE`` (or the grant
itself in ``SITE_API_CREDENTIAL``), ``RUNTIME_EXECUTOR``, ``RUNTIME_STATE_DIRECTORY``,
``RUNTIME_WORKSPACE_ROOT``. Local executor settings: ``RUNTIME_LOCAL_MAX_WALL_SECONDS``,
``RUNTIME_LOCAL_GRACE_SECONDS``, ``RUNTIME_LOCAL_STAGING_SECONDS``,
``RUNTIME_LOCAL_MAX_ACTIVE``, ``RUNTIME_LOCAL_RELEASE_SECONDS``, ``REPOSITORY_CA_FILE``.

The slurm executor is imported from ``site_runtime.adaptors.slurm_executor`` only
with ``--executor slurm``; it reads its own ``SLURM_*`` settings. The kubernetes
executor (``site_runtime.adaptors.kubernetes``, ``--executor kubernetes``) reads
``KUBERNETES_*`` settings (docs/site-runtime.md, Kubernetes); ``--kubeconfig``
overrides ``KUBERNETES_KUBECONFIG``. SIGTERM/SIGINT
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
from typing import Any

from metallo.log_setup import configure_logging
from site_runtime.adaptors.edge_client import EdgeClient, EdgeSettings
from site_runtime.adaptors.journal import SqliteDeliveryJournal
from site_runtime.application.delivery import JournalMismatch
from site_runtime.application.worker import Worker, WorkerSettings

log = logging.getLogger("site_runtime")


class SettingsError(ValueError):
    """A setting is missing or malformed; the Runtime does not start."""


def _int(env: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer") from None
    if not minimum <= value <= 2147483647:
        raise SettingsError(f"{name} must be between {minimum} and 2147483647")
    return value


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
        help="kubernetes executor: kubeconfig of the Runtime's own identity",
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


def build_local_executor(args: argparse.Namespace, env: Mapping[str, str], edge: EdgeClient):
    """The embedded local executor with its ``jobs.sqlite`` in the state directory."""
    from site_runtime.adaptors.local_executor import LocalExecutor, LocalSettings
    from site_runtime.adaptors.local_jobs import LocalJobsJournal

    state = Path(args.state_dir)
    settings = LocalSettings(
        workspace_root=Path(args.workspace_root) if args.workspace_root else state / "workspaces",
        max_wall_seconds=_int(env, "RUNTIME_LOCAL_MAX_WALL_SECONDS", None, 1),
        grace_seconds=float(_int(env, "RUNTIME_LOCAL_GRACE_SECONDS", 10, 0) or 0),
        staging_seconds=_int(env, "RUNTIME_LOCAL_STAGING_SECONDS", 600, 1) or 600,
        max_active=_int(env, "RUNTIME_LOCAL_MAX_ACTIVE", 4, 1) or 4,  # 0 would start nothing
        release_delay_seconds=float(_int(env, "RUNTIME_LOCAL_RELEASE_SECONDS", 1, 0) or 0),
        repository_ca_file=Path(env["REPOSITORY_CA_FILE"])
        if env.get("REPOSITORY_CA_FILE")
        else (Path(args.ca) if args.ca else None),
    )
    return LocalExecutor(
        settings,
        LocalJobsJournal(state / "jobs.sqlite"),
        authority=edge,
        grants=edge,
        on_native_end=edge.notice_native_end,  # ends reach Execution Core at once (ADR 0016)
    )


def build_slurm_executor(args: argparse.Namespace, env: Mapping[str, str]):
    """The slurm executor (Slurm helper's ``adaptors/slurm_executor.py``), imported only
    here. Contract: ``build_executor(*, env, edge_url, ca_file, credential_file,
    state_directory) -> QueuedBatchExecutor``."""
    from site_runtime.adaptors import slurm_executor

    try:
        return slurm_executor.build_executor(
            env=env,
            edge_url=args.edge,
            ca_file=Path(args.ca) if args.ca else None,
            credential_file=Path(args.grant_file) if args.grant_file else None,
            state_directory=Path(args.state_dir),
        )
    except slurm_executor.SettingsError as error:  # malformed SLURM_* value: exit status 2
        raise SettingsError(f"slurm executor: {error}") from None


def build_kubernetes_executor(args: argparse.Namespace, env: Mapping[str, str], edge: EdgeClient):
    """The kubernetes executor, imported only here (lightkube is not loaded otherwise)."""
    from site_runtime.adaptors.kubernetes import composition

    try:
        return composition.build_kubernetes_executor(
            env, Path(args.state_dir), edge, kubeconfig=args.kubeconfig
        )
    except composition.SettingsError as error:
        raise SettingsError(f"kubernetes executor: {error}") from None


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
    executor: Any
    if args.executor == "local":
        executor = build_local_executor(args, env, edge)
    elif args.executor == "kubernetes":
        executor = build_kubernetes_executor(args, env, edge)
    else:
        executor = build_slurm_executor(args, env)
    journal = SqliteDeliveryJournal(state / "delivery.sqlite")
    worker = Worker(edge, journal, executor, WorkerSettings(wait_seconds=args.wait))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    supervise = getattr(executor, "start_supervision", None)
    if supervise is not None:
        await supervise()
    log.info(
        "Site Runtime started: edge %s, executor %s, state %s", args.edge, args.executor, state
    )
    status = 0
    try:
        await worker.run(stop)
    except JournalMismatch as error:
        log.error("stopping: %s (see docs/site-runtime.md, Recovery)", error)
        status = 3
    finally:
        stop_supervision = getattr(executor, "stop_supervision", None)
        if stop_supervision is not None:
            await stop_supervision()
        close = getattr(executor, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                await result
        await edge.close()
        journal.close()
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
