"""Permit-checked log reads for the executors' ``read_log`` (seed 001, Private Run log
commands; docs/site-runtime.md, read-log).

A ``read-log`` command carries ``{"stage", "max_bytes", "viewer", "read_id"}``. Before
any text leaves the Site the Runtime asks the Site edge for a read permit for the
exact Run, Attempt, viewer, read kind ``logs``, path ``logs/<stage>.log`` and byte
limit (``POST /v1/authorisations/read``), confirms it before reading and again
after reading (``POST /v1/read-permits/{permit_id}/check``: the viewer must still
hold ``runs.read`` and an account at the Site). The whole operation is capped at
ten seconds. The text is the tail of the log, at most ``max_bytes`` (≤ 5 MiB), and
its JSON encoding is kept inside the 4 MiB source-message budget so the recorded
result can travel to Execution Core.

A read has no native effect, so every failure is a definite ``refused`` result
(never a deferral that would hold the Site's ordered stream):

| code | when |
| --- | --- |
| ``invalid-request`` | ``max_bytes`` not 1 … 5 MiB, or no ``viewer`` |
| ``authorisation-refused`` | the edge refused the permit (message: its reason) |
| other edge codes | e.g. ``attempt-not-found``, ``invalid-read-path`` |
| ``authority-unavailable`` | the edge could not be asked |
| ``read-permit-unavailable`` | this Runtime has no edge authority for permits |
| ``log-read-timeout`` | the permit checks and the read took longer than ten seconds |
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from site_runtime.application.ports import CommandResult, SiteCommand

MAX_LOG_BYTES = 5 * 1024 * 1024  # seed 001: the encoded upload cap, 5 MiB
LOG_READ_SECONDS = 10.0  # seed 001: the operation is capped at ten seconds
# seed 001: the source-message budget is at most 4 MiB; leave room for the rest of the
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
    """Viewer read permits at the Site edge (seed 001, Private reads)."""

    async def authorise_read(self, request: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/authorisations/read`` with ``run_id, attempt_id, viewer, read_kind,
        path, max_bytes`` → the permit (``permit_id``, …, ``expires_at``). Raises
        PermitRefused or PermitUnavailable."""
        ...

    async def check_read_permit(self, permit_id: str) -> dict[str, Any]:
        """``POST /v1/read-permits/{permit_id}/check`` → the permit, confirmed now. Raises
        PermitRefused or PermitUnavailable."""
        ...


def fit_text(data: bytes, size: int, budget: int = MAX_ENCODED_TEXT_BYTES) -> tuple[str, bool]:
    """Decode a log tail (``data`` = the last bytes of a ``size``-byte log) and drop its
    oldest bytes until its JSON encoding fits ``budget`` bytes. Returns (text, truncated)."""
    truncated = size > len(data)
    while True:
        text = data.decode("utf-8", "replace")
        encoded = len(json.dumps(text, ensure_ascii=False).encode("utf-8"))
        if encoded <= budget:
            return text, truncated
        keep = max(0, int(len(data) * budget / encoded) - 16)
        data = data[len(data) - keep :]
        truncated = True


def _refused(command: SiteCommand, code: str, message: str) -> CommandResult:
    return CommandResult(command.command_id, "refused", code, message[:500])


async def permitted_read(
    command: SiteCommand,
    permits: ReadPermits | None,
    read_tail: Callable[[str, int], Awaitable[tuple[bytes, int]]],
    *,
    seconds: float = LOG_READ_SECONDS,
) -> CommandResult:
    """Answer a ``read-log`` command whose stage and Attempt the executor has checked:
    permit, confirm, ``read_tail(stage, max_bytes) -> (tail bytes, log size)``, confirm
    again, within ``seconds``. Returns ``succeeded`` with ``observation.log {stage,
    text, truncated}`` or a refusal (module doc). ``read_tail`` may raise OSError; it
    propagates (the executor decides)."""
    stage = str(command.payload.get("stage", "compute"))
    viewer = command.payload.get("viewer")
    try:
        max_bytes = int(command.payload.get("max_bytes", MAX_LOG_BYTES))
    except (TypeError, ValueError):
        return _refused(command, "invalid-request", "max_bytes is not a number")
    if not 1 <= max_bytes <= MAX_LOG_BYTES:
        return _refused(command, "invalid-request", f"max_bytes must be 1..{MAX_LOG_BYTES}")
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

    async def operation() -> tuple[bytes, int]:
        permit = await permits.authorise_read(request)
        permit_id = str(permit.get("permit_id") or "")
        await permits.check_read_permit(permit_id)
        data, size = await read_tail(stage, max_bytes)
        await permits.check_read_permit(permit_id)  # still permitted once read
        return data, size

    try:
        data, size = await asyncio.wait_for(operation(), timeout=seconds)
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
    text, truncated = fit_text(data, size)
    return CommandResult(
        command.command_id,
        "succeeded",
        observation={"log": {"stage": stage, "text": text, "truncated": truncated}},
    )
