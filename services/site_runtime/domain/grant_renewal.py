"""When an array task's repository grant is renewed (docs/site-runtime.md, Arrays).

An array task's staging grant is written into its material file when the group is
released, but the task may start hours later (``%maxActive``). While the file is
still there (the task has not started), the Runtime renews the grant before it gets
close to its expiry: it is due when less than the *margin* remains, the margin being
the Site's ``SLURM_ARRAY_GRANT_RENEW_SECONDS`` or half the grant's own lifetime,
whichever is smaller. A fresh grant is therefore not due again before half its
lifetime has passed: at most one renewal per task and stage per margin, however
often the child is observed.

Pure functions over plain values; the clock is always handed in.
"""

from __future__ import annotations

from datetime import datetime

#: Renew when less than this many seconds remain (or half the lifetime, if smaller).
DEFAULT_RENEW_SECONDS = 1800
#: A superseded grant this long past its expiry needs no revocation call: the edge
#: refuses it by itself (the allowance covers clock skew between Runtime and edge).
EXPIRY_ALLOWANCE_SECONDS = 300.0


def expiry_epoch(value: object) -> float | None:
    """A grant answer's ``expires_at`` (epoch seconds or ISO 8601 with an offset) in
    epoch seconds; None when absent or unreadable (such a grant is never renewed)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip():
        text = value.strip().replace("Z", "+00:00")
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        if parsed.tzinfo is None:
            return None  # a time without an offset is not a moment
        return parsed.timestamp()
    return None


def renewal_margin(lifetime: float, renew_seconds: float) -> float:
    """How long before expiry a grant of ``lifetime`` seconds is renewed."""
    return min(float(renew_seconds), max(lifetime, 0.0) / 2.0)


def renewal_due(
    issued_at: float, expires_at: float | None, now: float, renew_seconds: float
) -> bool:
    """True when a grant issued at ``issued_at`` and expiring at ``expires_at`` is to be
    renewed at ``now``. A grant without a known expiry, or with none after its issue
    (an edge answer no renewal can improve), is never due."""
    if expires_at is None:
        return False
    lifetime = expires_at - issued_at
    if lifetime <= 0:
        return False
    return expires_at - now < renewal_margin(lifetime, renew_seconds)


def revocation_needed(expires_at: float | None, now: float) -> bool:
    """Whether a superseded grant still needs a revocation call at ``now`` (False once
    it is :data:`EXPIRY_ALLOWANCE_SECONDS` past its expiry)."""
    return expires_at is None or now < expires_at + EXPIRY_ALLOWANCE_SECONDS


def parse_material(data: bytes) -> dict[str, str]:
    """The entries of a task's material file (the inverse of ``material_bytes``):
    ``NAME=value`` pieces, each ended by a NUL byte. ValueError for a malformed file."""
    if data and not data.endswith(b"\x00"):
        raise ValueError("a material file ends with a NUL byte")
    entries: dict[str, str] = {}
    for piece in data.split(b"\x00")[:-1]:
        name, sep, value = piece.decode().partition("=")
        if not sep or not name:
            raise ValueError("a material entry is NAME=value")
        entries[name] = value
    return entries


def renewed_material(entries: dict[str, str], username: str, token: str) -> dict[str, str]:
    """The task's entries with its repository identity replaced by a renewed grant's
    (every other entry unchanged). ValueError when the file holds no grant."""
    if "METALLO_GIT_PASSWORD" not in entries:
        raise ValueError("the material file holds no repository grant")
    return {**entries, "METALLO_GIT_USERNAME": username, "METALLO_GIT_PASSWORD": token}
