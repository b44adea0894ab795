"""A Run's end ends its repository grants (seed 001: repository grants are limited
to outstanding Attempts; docs/site-edge.md, Repository grants).

Execution Core's ``RunCompleted`` is committed with the Run's terminal state, so
every Attempt of the Run is terminal by then. Site Coordination revokes the Run's
outstanding grants itself on that event — not only when a Runtime remembers to —
and issues none for the Run afterwards.
"""

from __future__ import annotations

import logging

from site_coordination.application.ports import RunEnds, SiteStore, SourceControl
from site_coordination.domain.errors import Conflict

log = logging.getLogger("site_coordination.run_ends")


async def run_ended(ends: RunEnds, store: SiteStore, source_control: SourceControl,
                    run_id: str, outcome: str) -> int:
    """Record that ``run_id`` ended with ``outcome`` and revoke its outstanding
    repository grants in the caller's transaction. Returns how many were revoked
    (0 on a repeat). An event without a ``run_id`` changes nothing."""
    if not run_id:
        log.warning("RunCompleted without run_id ignored")
        return 0
    await ends.record_run_end(run_id, outcome or "unknown")
    outstanding = await ends.outstanding_grants(run_id)
    for grant_id, provider_ref in outstanding:
        await source_control.revoke(provider_ref)
        await store.revoke_repository_grant(grant_id)
    if outstanding:
        log.info("Run %s ended (%s): revoked %d repository grant(s)", run_id, outcome,
                 len(outstanding))
    return len(outstanding)


async def refuse_after_run_end(ends: RunEnds, run_id: str) -> None:
    """Raise :class:`Conflict` ``attempt-completed`` when the Run has ended."""
    if await ends.run_ended(run_id):
        raise Conflict("attempt-completed",
                       "the Attempt's Run has ended; its repository grants are over")
