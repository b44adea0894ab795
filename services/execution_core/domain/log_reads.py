"""Private Run log reads: the pure rules (seed 001, Private Run log commands).

A member asks for the tail of one stage log of a Run's Attempt. Execution Core
records a *log read* and sends a ``read-log`` Site command; the Site Runtime
checks the viewer's read permit at the Site edge, reads at most ``max_bytes``
and answers within ten seconds. A read moves once:

    pending → ready | refused        (the Site's result)
    pending → expired                (no result within ``log_read_seconds``)

A result arriving after the deadline leaves the read ``expired`` (the operation
is capped at ten seconds; late text is not kept).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

STAGES = ("stage-in", "compute", "stage-out")
MAX_LOG_BYTES = 5 * 1024 * 1024  # seed 001: the encoded upload cap, 5 MiB
LOG_READ_SECONDS = 10.0  # seed 001: the operation is capped at ten seconds
# A result carrying a log may be larger than an ordinary result (256 KiB) but stays
# inside the 4 MiB source-message budget of seed 001 (the broker envelope's bound).
MAX_LOG_RESULT_BYTES = 4 * 1024 * 1024

PENDING = "pending"
READY = "ready"
REFUSED = "refused"
EXPIRED = "expired"
STATES = frozenset({PENDING, READY, REFUSED, EXPIRED})

# Reason codes of a read (RunLogRead.reason_code).
EXPIRED_CODE = "log-read-expired"  # no answer from the Site within the cap
MALFORMED_CODE = "log-result-malformed"  # the Site answered without a usable log

_NAMESPACE = uuid.UUID("0b7f6f43-6c55-4a43-9d1f-5a2f1a8f3e27")


def read_id_for(project: str, command_id: str) -> str:
    """The read id of a ReadRunLog command (uuid5 of Project and command id): a replay
    of the same command names the same read."""
    return str(uuid.uuid5(_NAMESPACE, f"{project}\x00{command_id}"))


def site_command_id_for(read_id: str) -> str:
    """The ``read-log`` Site command id of a read: deterministic per read, so a
    re-sent append is absorbed by Site Coordination's idempotency."""
    return str(uuid.uuid5(_NAMESPACE, f"read-log\x00{read_id}"))


def effective_max_bytes(requested: int) -> int:
    """``requested`` bytes (1 … 5 MiB); 0 means the cap, 5 MiB. Raises ValueError
    outside 0 … 5 MiB."""
    if requested == 0:
        return MAX_LOG_BYTES
    if not 1 <= requested <= MAX_LOG_BYTES:
        raise ValueError(f"max_bytes must be 1..{MAX_LOG_BYTES}")
    return requested


def pick_attempt(attempts: list[dict[str, Any]], number: int) -> dict[str, Any] | None:
    """Attempt ``number`` of a Run (0 = the latest), or None."""
    if not attempts:
        return None
    if number == 0:
        return max(attempts, key=lambda a: a["number"])
    return next((a for a in attempts if a["number"] == number), None)


def visible_state(state: str, deadline: datetime, now: datetime) -> tuple[str, str]:
    """(state, reason_code) as a reader sees it at ``now``: a pending read past its
    deadline is ``expired``."""
    if state == PENDING and now >= deadline:
        return EXPIRED, EXPIRED_CODE
    return state, ""


@dataclass(frozen=True)
class LogAnswer:
    """What a Site result says about a read: the new state and its facts."""

    state: str
    text: str = ""
    truncated: bool = False
    reason_code: str = ""
    message: str = ""


def answer_from_result(result: dict[str, Any], max_bytes: int) -> LogAnswer:
    """Read a ``read-log`` result (docs/site-commands.md): ``succeeded`` with
    ``observation.log {stage, text, truncated}`` → ready; ``refused`` → refused with
    its code. Text longer than ``max_bytes`` (UTF-8) keeps its tail and is marked
    truncated."""
    if result.get("outcome") == "refused":
        return LogAnswer(
            REFUSED,
            reason_code=str(result.get("code") or "log-read-refused")[:128],
            message=str(result.get("message") or "")[:500],
        )
    observation = result.get("observation")
    log = observation.get("log") if isinstance(observation, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("text"), str):
        return LogAnswer(REFUSED, reason_code=MALFORMED_CODE)
    raw = log["text"].encode("utf-8")
    truncated = bool(log.get("truncated"))
    if len(raw) > max_bytes:
        raw = raw[len(raw) - max_bytes :]
        truncated = True
    # PostgreSQL text cannot hold NUL; a log may (binary output): shown as U+FFFD.
    text = raw.decode("utf-8", "ignore").replace("\x00", "\ufffd")
    return LogAnswer(READY, text=text, truncated=truncated)
