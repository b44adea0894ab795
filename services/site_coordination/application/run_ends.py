"""An Attempt's end and its Run's end end their repository grants (seed 001: repository
grants are limited to outstanding Attempts; docs/site-edge.md, Repository grants).

Site Coordination revokes the outstanding grants itself — not only when a Runtime
remembers to — and issues none afterwards, when

* a result recorded at the edge ends the Attempt (a terminal phase, a refused
  ``prepare``/``start``/``apply``);
* a command of a later Attempt of the same Run is appended: a Run has one Attempt
  at a time, so a retry means every earlier Attempt has ended (also one that ended
  without a result, e.g. lost);
* Execution Core's ``RunCompleted`` (committed with the Run's terminal state) says
  the Run ended.
"""

from __future__ import annotations

import logging
from typing import Any

from site_coordination.application.ports import RunEnds, SiteStore, SourceControl
from site_coordination.domain.errors import Conflict
from site_coordination.domain.streams import StoredCommand, result_ends_attempt

log = logging.getLogger("site_coordination.run_ends")


async def run_ended(ends: RunEnds, store: SiteStore, source_control: SourceControl,
                    run_id: str, outcome: str) -> list[str]:
    """Record that ``run_id`` ended with ``outcome`` and revoke its outstanding
    repository grants in the caller's transaction. Returns the ids revoked, in id
    order (none on a repeat). An event without a ``run_id`` changes nothing."""
    if not run_id:
        log.warning("RunCompleted without run_id ignored")
        return []
    await ends.record_run_end(run_id, outcome or "unknown")
    outstanding = await ends.outstanding_grants(run_id)
    for grant_id, provider_ref in outstanding:
        await source_control.revoke(provider_ref)
        await store.revoke_repository_grant(grant_id)
    if outstanding:
        log.info("Run %s ended (%s): revoked %d repository grant(s)", run_id, outcome,
                 len(outstanding))
    return [grant_id for grant_id, _ in outstanding]


async def attempt_ended(ends: RunEnds, source_control: SourceControl, store: SiteStore,
                        run_id: str, attempt_id: str, reason: str) -> list[str]:
    """Record that ``attempt_id`` (of ``run_id``) ended for ``reason`` (result |
    superseded) and revoke its outstanding repository grants in the caller's
    transaction. Returns the ids revoked, in id order (none on a repeat)."""
    await ends.record_attempt_end(attempt_id, run_id, reason)
    outstanding = await ends.outstanding_attempt_grants(attempt_id)
    for grant_id, provider_ref in outstanding:
        await source_control.revoke(provider_ref)
        await store.revoke_repository_grant(grant_id)
    if outstanding:
        log.info("Attempt %s of Run %s ended (%s): revoked %d repository grant(s)",
                 attempt_id, run_id, reason, len(outstanding))
    return [grant_id for grant_id, _ in outstanding]


async def result_recorded(ends: RunEnds, source_control: SourceControl, store: SiteStore,
                          command: StoredCommand, result: dict[str, Any]) -> list[str]:
    """A result of ``command`` was just recorded: when it ends the Attempt
    (:func:`result_ends_attempt`), :func:`attempt_ended` (``result``). Returns the
    grant ids revoked."""
    if not result_ends_attempt(command.kind, result):
        return []
    return await attempt_ended(ends, source_control, store, command.run_id,
                               command.attempt_id, "result")


async def earlier_attempts_ended(ends: RunEnds, source_control: SourceControl,
                                 store: SiteStore, run_id: str, attempt_number: int) -> list[str]:
    """A command of Attempt ``attempt_number`` of ``run_id`` was appended: end every
    earlier Attempt of the Run not yet ended (:func:`attempt_ended`, ``superseded``).
    Returns the grant ids revoked."""
    revoked: list[str] = []
    for earlier in await ends.earlier_open_attempts(run_id, attempt_number):
        revoked += await attempt_ended(ends, source_control, store, run_id, earlier, "superseded")
    return revoked


async def refuse_after_run_end(ends: RunEnds, run_id: str, attempt_id: str = "") -> None:
    """Raise :class:`Conflict` ``attempt-completed`` when the Run, or the Attempt
    ``attempt_id``, has ended."""
    if await ends.run_ended(run_id):
        raise Conflict("attempt-completed",
                       "the Attempt's Run has ended; its repository grants are over")
    if attempt_id and await ends.attempt_ended(attempt_id):
        raise Conflict("attempt-completed",
                       "the Attempt has ended; its repository grants are over")
