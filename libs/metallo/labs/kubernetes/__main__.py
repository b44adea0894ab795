"""``python -m metallo.labs.kubernetes --state DIR --port N [--pid-file F]``: run the lab."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from pathlib import Path

from metallo.labs.kubernetes.server import Lab

REPO = Path(__file__).resolve().parents[4]


async def _serve(args: argparse.Namespace) -> None:
    lab = Lab(Path(args.state), args.port, Path(args.governance), args.site)
    runner = await lab.start()
    if args.pid_file:
        Path(args.pid_file).write_text(f"{os.getpid()}\n", encoding="utf-8")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await lab.stop(runner)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m metallo.labs.kubernetes", description=__doc__)
    parser.add_argument("--state", required=True, help="state directory (kubeconfig, CA, volumes, logs)")
    parser.add_argument("--port", type=int, default=6443, help="loopback HTTPS port (default 6443)")
    parser.add_argument("--pid-file", default=None)
    parser.add_argument("--governance", default=os.environ.get(
        "METALLO_GOVERNANCE_FILE", str(REPO / "examples" / "governance.yaml")))
    parser.add_argument("--site", default=os.environ.get("METALLO_K8S_LAB_SITE", "lab-k8s"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
