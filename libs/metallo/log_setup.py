"""One log line format for every Metallo process (a new user met three).

``2026-11-30 01:13:26,579 INFO site_runtime.worker: command 11252 (start): result recorded``
— time, level, logger, message — so the dev stack's prefixed ``stack.log`` reads
the same whichever service wrote a line.
"""

from __future__ import annotations

import logging
import os

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def configure_logging(level: str | None = None) -> None:
    """Log to stderr in :data:`FORMAT` at ``level`` (default ``METALLO_LOG_LEVEL``, else
    INFO). Raises ValueError naming the allowed levels for an unknown one."""
    chosen = (level or os.environ.get("METALLO_LOG_LEVEL") or "INFO").strip().upper()
    if chosen not in LEVELS:
        raise ValueError(f"log level {chosen!r} is not one of {', '.join(LEVELS)}")
    logging.basicConfig(level=chosen, format=FORMAT)
