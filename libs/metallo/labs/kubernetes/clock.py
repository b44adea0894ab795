"""Timestamps as Kubernetes writes them (RFC 3339, UTC, ``Z``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def rfc3339(at: float | None = None) -> str:
    """``2026-12-01T20:00:00Z`` (whole seconds, as metadata and conditions use)."""
    return datetime.fromtimestamp(time.time() if at is None else at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(at: float) -> str:
    """``2026-12-01T20:00:00.123456789Z`` (log timestamps; microseconds padded)."""
    dt = datetime.fromtimestamp(at, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}000Z"


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (``Z`` or an offset, fraction optional)."""
    t = text.strip().replace("Z", "+00:00")
    if "." in t:  # Python accepts at most 6 fraction digits
        head, rest = t.split(".", 1)
        digits = "".join(c for c in rest if c.isdigit())
        tz = rest[len(digits):]
        t = f"{head}.{digits[:6].ljust(6, '0')}{tz}"
    return datetime.fromisoformat(t).timestamp()
