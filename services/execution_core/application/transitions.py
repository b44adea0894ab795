"""The Run's transition log (seed 002 §9.2): each change of its state dimensions.

Called right after a versioned write of the Run, in the same transaction, so the
log and the row can never disagree. A write that changes none of the tracked
dimensions (e.g. a wake-up time) adds nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.application.ports import RunStore

TRACKED = ("phase", "desired_state", "observation_phase", "outcome", "attempt_count")


async def record_transition(
    session: AsyncSession,
    store: RunStore,
    before: dict[str, Any] | None,
    values: dict[str, Any],
    version: int,
) -> None:
    """Append the Run's new dimensions at ``version`` when any tracked one changed.

    ``before`` is the row as read before the write (None for a new Run);
    ``values`` are the columns just written.
    """
    after = {**(before or {}), **values}
    if before is not None and all(after.get(k) == before.get(k) for k in TRACKED):
        return
    await store.append_transition(
        session,
        {
            "run_id": after["run_id"],
            "version": version,
            "phase": after.get("phase", ""),
            "desired_state": after.get("desired_state", ""),
            "observation_phase": after.get("observation_phase") or "",
            "outcome": after.get("outcome") or "",
            "reason_code": after.get("reason_code") or "",
            "attempt_number": after.get("attempt_count") or 0,
        },
    )
