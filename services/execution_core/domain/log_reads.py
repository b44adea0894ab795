"""Private Run log reads: the pure rules (seed 001, Private Run log commands).

A member asks for the tail of one stage log of a Run's Attempt — or, to follow a log
as it grows, for what it holds from a byte offset on. Execution Core
records a *log read* and sends a ``read-log`` Site command; the Site Runtime
checks the viewer's read permit at the Site edge, reads at most ``max_bytes``
and answers within ten seconds. A read moves once:

    pending → ready | refused        (the Site's result)
    pending → expired                (no result within ``log_read_seconds``)

A result arriving after the deadline leaves the read ``expired`` (the operation
is capped at ten seconds; late text is not kept).

An Attempt's logs can be read once its prepare is on the way to the Site (any state
but ``pending``), while it runs and after it ended. Answered reads are kept for
``log_read_retention_seconds`` (following a log makes many small reads).
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


MAX_OFFSET = 2**63 - 1


def readable(attempt_state: str) -> bool:
    """Whether an Attempt in ``attempt_state`` has logs at its Site to read: every state
    but ``pending`` (its prepare is not sent yet, so the Site does not know it)."""
    return attempt_state != "pending"


def check_offset(offset: int) -> int:
    """``offset`` (bytes, 0 … 2⁶³−1) as given. Raises ValueError when negative."""
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError("offset must be 0 or more (bytes)")
    return offset


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
    """What a Site result says about a read: the new state and its facts (offsets in
    bytes of the Site's log; None when the Site's Runtime did not give them)."""

    state: str
    text: str = ""
    truncated: bool = False
    reason_code: str = ""
    message: str = ""
    text_offset: int | None = None
    next_offset: int | None = None
    log_size: int | None = None


def _byte_count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_OFFSET:
        return None
    return value


def answer_from_result(
    result: dict[str, Any], max_bytes: int, requested_offset: int | None = None
) -> LogAnswer:
    """Read a ``read-log`` result (docs/site-commands.md): ``succeeded`` with
    ``observation.log {stage, text, truncated, offset, next_offset, size}`` → ready;
    ``refused`` → refused with its code. A tail read's text longer than ``max_bytes``
    (UTF-8) keeps its tail and is marked truncated; a read from ``requested_offset``
    answered without offsets, from another offset or covering more than ``max_bytes``
    of the log is malformed (it could not be followed without loss or repetition).
    A tail read's offsets that are not whole non-negative numbers are dropped (it
    cannot be followed; its text stands)."""
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
    text_offset, next_offset, size = (
        _byte_count(log.get(k)) for k in ("offset", "next_offset", "size")
    )
    if next_offset is None or text_offset is None or next_offset < text_offset:
        text_offset = next_offset = None
    if requested_offset is not None:
        # Bytes of the log, not of the text: undecodable bytes come back as U+FFFD (3
        # bytes each), so the text may be longer than what it covers.
        if (
            text_offset is None
            or next_offset is None
            or text_offset != requested_offset
            or next_offset - text_offset > max_bytes
        ):
            return LogAnswer(REFUSED, reason_code=MALFORMED_CODE)
    elif len(raw) > max_bytes:
        raw = raw[len(raw) - max_bytes :]
        truncated = True
        text_offset = None  # cut here: where the text starts is no longer known exactly
    # PostgreSQL text cannot hold NUL; a log may (binary output): shown as U+FFFD.
    text = raw.decode("utf-8", "ignore").replace("\x00", "\ufffd")
    return LogAnswer(
        READY,
        text=text,
        truncated=truncated,
        text_offset=text_offset,
        next_offset=next_offset,
        log_size=size,
    )
