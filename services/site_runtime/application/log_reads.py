"""Permit-checked log reads for the executors' ``read_log`` (docs/site-commands.md, ``read-log``; Private Run log
commands; docs/site-runtime.md, read-log).

A ``read-log`` command carries ``{"stage", "max_bytes", "viewer", "read_id"}`` and, to
follow a log as it grows, ``"offset"`` (bytes). Before
any text leaves the Site the Runtime asks the Site edge for a read permit for the
exact Run, Attempt, viewer, read kind ``logs``, path ``logs/<stage>.log`` and byte
limit (``POST /v1/authorisations/read``), confirms it before reading and again
after reading (``POST /v1/read-permits/{permit_id}/check``: the viewer must still
hold ``runs.read`` and an account at the Site). The whole operation is capped at
ten seconds. The text is the tail of the log, at most ``max_bytes`` (≤ 5 MiB) — or,
with ``offset``, the log from that byte on, at most ``max_bytes`` and ending on a
whole UTF-8 character — and its JSON encoding is kept inside the 4 MiB
source-message budget so the recorded result can travel to Execution Core. The
answer says where its text starts (``offset``), where the next read of what follows
starts (``next_offset``) and the log's size when read (``size``), all in bytes.

A read has no native effect, so every failure is a definite ``refused`` result
(never a deferral that would hold the Site's ordered stream):

| code | when |
| --- | --- |
| ``invalid-request`` | ``max_bytes`` not 1 … 5 MiB, ``offset`` not 0 … 2⁶³−1, or no ``viewer`` |
| ``authorisation-refused`` | the edge refused the permit (message: its reason) |
| other edge codes | e.g. ``attempt-not-found``, ``invalid-read-path`` |
| ``authority-unavailable`` | the edge could not be asked |
| ``read-permit-unavailable`` | this Runtime has no edge authority for permits |
| ``log-read-timeout`` | the permit checks and the read took longer than ten seconds |
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from site_runtime.application.ports import CommandResult, SiteCommand

MAX_LOG_BYTES = 5 * 1024 * 1024  # the encoded upload cap, 5 MiB
LOG_READ_SECONDS = 10.0  # the operation is capped at ten seconds
# the source-message budget is at most 4 MiB; leave room for the rest of the
# result and the message that carries it to Execution Core.
MAX_ENCODED_TEXT_BYTES = 4 * 1024 * 1024 - 64 * 1024
_VIEWER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


class PermitRefused(Exception):
    """The edge definitely refused the read permit; ``code`` is its stable error code,
    ``reason`` the authorisation reason when it gave one."""

    def __init__(self, code: str, reason: str | None = None) -> None:
        super().__init__(f"{code}: {reason}" if reason else code)
        self.code = code
        self.reason = reason


class PermitUnavailable(Exception):
    """The edge could not be asked about the permit now."""


@runtime_checkable
class ReadPermits(Protocol):
    """Viewer read permits at the Site edge (docs/site-runtime.md, Codes)."""

    async def authorise_read(self, request: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/authorisations/read`` with ``run_id, attempt_id, viewer, read_kind,
        path, max_bytes`` → the permit (``permit_id``, …, ``expires_at``). Raises
        PermitRefused or PermitUnavailable."""
        ...

    async def check_read_permit(self, permit_id: str) -> dict[str, Any]:
        """``POST /v1/read-permits/{permit_id}/check`` → the permit, confirmed now. Raises
        PermitRefused or PermitUnavailable."""
        ...


def complete_utf8(data: bytes) -> bytes:
    """``data`` without a trailing *incomplete* UTF-8 sequence (at most 3 bytes): the
    start of a character whose other bytes are not written yet, or lie past a read
    limit. The next read from the returned length gets the whole character. Bytes that
    can never start a valid sequence are kept (they decode as U+FFFD)."""
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: a lead byte or ASCII
            need = (
                2
                if byte & 0xE0 == 0xC0
                else 3
                if byte & 0xF0 == 0xE0
                else (4 if byte & 0xF8 == 0xF0 else 1)
            )
            return data[:-back] if need > back else data
    return data


def fit_head(data: bytes, budget: int = MAX_ENCODED_TEXT_BYTES) -> tuple[str, int]:
    """Decode a read from an offset (``data`` = the log's bytes from there) and drop its
    newest bytes until its JSON encoding fits ``budget`` bytes, ending on a whole
    character. Returns (text, bytes of ``data`` the text covers). When ``data`` is only
    the first bytes of one character (a read limit below that character's length) they
    are returned decoded as U+FFFD, so a reader always gets past them."""
    whole = complete_utf8(data)
    if not whole and data:
        return data.decode("utf-8", "replace"), len(data)
    data = whole
    while True:
        text = data.decode("utf-8", "replace")
        encoded = len(json.dumps(text, ensure_ascii=False).encode("utf-8"))
        if encoded <= budget:
            return text, len(data)
        data = complete_utf8(data[: max(0, int(len(data) * budget / encoded) - 16)])


def fit_tail(data: bytes, budget: int = MAX_ENCODED_TEXT_BYTES) -> tuple[str, int]:
    """Decode a log's tail (``data``) and drop its oldest bytes until its JSON encoding
    fits ``budget`` bytes. Returns (text, bytes of ``data`` the text covers: its last)."""
    kept = data
    while True:
        text = kept.decode("utf-8", "replace")
        encoded = len(json.dumps(text, ensure_ascii=False).encode("utf-8"))
        if encoded <= budget:
            return text, len(kept)
        keep = max(0, int(len(kept) * budget / encoded) - 16)
        kept = kept[len(kept) - keep :]


def _refused(command: SiteCommand, code: str, message: str) -> CommandResult:
    return CommandResult(command.command_id, "refused", code, message[:500])


def read_span(path: Path, max_bytes: int, offset: int | None) -> tuple[bytes, int, int]:
    """Part of the file at ``path``: its last ``max_bytes`` (``offset`` None) or at most
    ``max_bytes`` from byte ``offset`` on (none when the file is shorter). Returns
    (bytes, where they start, the file's size), all in bytes; an absent file is empty
    (a stage that has not written yet).
    Raises OSError when the file exists but cannot be read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            # An offset past the end stays where it was asked for (nothing to read):
            # ``size`` below it tells the reader that the log started over.
            start = max(0, size - max_bytes) if offset is None else offset
            f.seek(start)
            data = f.read(max_bytes)
            grown = start + len(data) if data else 0  # it may have grown since fstat
            return data, start, max(size, grown)
    except FileNotFoundError:
        return b"", 0, 0


def _offset(payload: dict[str, Any]) -> int | None:
    """The payload's ``offset`` (None: read the tail). Raises ValueError when malformed."""
    raw = payload.get("offset")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < 2**63:
        raise ValueError("offset must be a whole number of bytes, 0 or more")
    return raw


async def permitted_read(
    command: SiteCommand,
    permits: ReadPermits | None,
    read: Callable[[str, int, int | None], Awaitable[tuple[bytes, int, int]]],
    *,
    seconds: float = LOG_READ_SECONDS,
) -> CommandResult:
    """Answer a ``read-log`` command whose stage and Attempt the executor has checked:
    permit, confirm, ``read(stage, max_bytes, offset) -> (bytes, start, log size)`` (as
    :func:`read_span`), confirm again, within ``seconds``. Returns ``succeeded`` with
    ``observation.log {stage, text, truncated, offset, next_offset, size}`` or a refusal
    (module doc). ``read`` may raise OSError; it propagates (the executor decides)."""
    stage = str(command.payload.get("stage", "compute"))
    viewer = command.payload.get("viewer")
    try:
        max_bytes = int(command.payload.get("max_bytes", MAX_LOG_BYTES))
    except (TypeError, ValueError):
        return _refused(command, "invalid-request", "max_bytes is not a number")
    if not 1 <= max_bytes <= MAX_LOG_BYTES:
        return _refused(command, "invalid-request", f"max_bytes must be 1..{MAX_LOG_BYTES}")
    try:
        offset = _offset(command.payload)
    except ValueError as error:
        return _refused(command, "invalid-request", str(error))
    if not isinstance(viewer, str) or not _VIEWER.match(viewer):
        return _refused(command, "invalid-request", "the read names no viewer")
    if permits is None:
        return _refused(
            command, "read-permit-unavailable", "this Runtime cannot check read permits"
        )
    request = {
        "run_id": command.run_id,
        "attempt_id": command.attempt_id,
        "viewer": viewer,
        "read_kind": "logs",
        "path": f"logs/{stage}.log",
        "max_bytes": max_bytes,
    }

    async def operation() -> tuple[bytes, int, int]:
        permit = await permits.authorise_read(request)
        permit_id = str(permit.get("permit_id") or "")
        await permits.check_read_permit(permit_id)
        span = await read(stage, max_bytes, offset)
        await permits.check_read_permit(permit_id)  # still permitted once read
        return span

    try:
        data, start, size = await asyncio.wait_for(operation(), timeout=seconds)
    except TimeoutError:
        return _refused(
            command, "log-read-timeout", f"the read took longer than {seconds:g} seconds"
        )
    except PermitRefused as refused:
        return _refused(
            command, refused.code, f"read permit refused: {refused.reason or refused.code}"
        )
    except PermitUnavailable:
        return _refused(command, "authority-unavailable", "the read permit cannot be checked now")
    if offset is None:
        # A character still being written is left for the next read (from next_offset).
        data = complete_utf8(data)
        text, kept = fit_tail(data)
        covered_to = start + len(data)
        start = covered_to - kept
        truncated = start > 0  # the log holds more before the text
    else:
        read_to = start + len(data)
        if read_to < size:  # stopped at max_bytes: whole characters, and always progress
            text, covered = fit_head(data)
            truncated = True  # more follows now: the reader asks again at once
        else:  # at the end: a character still being written waits for the next read
            whole = complete_utf8(data)
            text, covered = fit_head(whole) if whole else ("", 0)
            truncated = covered < len(whole)  # cut to the message budget
        covered_to = start + covered
    log = {
        "stage": stage,
        "text": text,
        "truncated": truncated,
        "offset": start,
        "next_offset": covered_to,
        "size": size,
    }
    return CommandResult(command.command_id, "succeeded", observation={"log": log})


async def read_stage_log(
    command: SiteCommand,
    permits: ReadPermits | None,
    stages: Collection[str],
    log_file: Callable[[str], Path],
) -> CommandResult:
    """An executor's ``read-log``: ``unknown-stage`` for a stage not in ``stages``, else
    :func:`permitted_read` of ``log_file(stage)`` off the event loop; a log that cannot
    be read is refused ``workspace-unavailable``. The Attempt was checked by the caller."""
    stage = command.payload.get("stage", "compute")
    if stage not in stages:
        return CommandResult(command.command_id, "refused", "unknown-stage", "no such stage")

    async def read(name: str, max_bytes: int, offset: int | None) -> tuple[bytes, int, int]:
        return await asyncio.to_thread(read_span, log_file(name), max_bytes, offset)

    try:
        return await permitted_read(command, permits, read)
    except OSError:
        return CommandResult(
            command.command_id, "refused", "workspace-unavailable", "the log cannot be read"
        )
