"""Cancelling one child of an array group: ``scancel JOB_TASK`` in each stage (ADR 0032).

A child is the Attempt at task index ``i`` of its group's saved mapping; its tasks are
``<array job id>_<i>`` of every array submitted so far. Siblings are never touched.
Not yet wired to a Site command: the ``cancel`` of an Attempt in a group still goes
through the single-chain path.
"""

from __future__ import annotations

from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm.array_journal import ArrayJournal
from site_runtime.adaptors.slurm.errors import deferring
from site_runtime.adaptors.slurm.rest import SlurmRest
from site_runtime.domain.slurm_arrays import child_tasks


class ArrayChildCancellation:
    """``scancel`` one child's tasks through slurmrestd, as the member."""

    def __init__(self, *, arrays: ArrayJournal, rest: SlurmRest) -> None:
        self.arrays = arrays
        self.rest = rest

    async def cancel_child(
        self, group_id: str, attempt_id: str, user: str, credential: MemberCredential
    ) -> dict[str, str]:
        """Cancel ``attempt_id``'s task in each submitted array of ``group_id``;
        ``{JOBID_TASK: accepted | not-found | already-terminal}`` in stage order.

        KeyError for an unknown group or an Attempt not in it; Deferred when
        slurmrestd cannot answer (nothing is assumed cancelled)."""
        group = self.arrays.group(group_id)
        if group is None:
            raise KeyError(group_id)
        rows = self.arrays.stages(group_id)
        tasks = child_tasks({s: r.job_id for s, r in rows.items()}, group.mapping, attempt_id)
        results: dict[str, str] = {}
        with deferring(attempt_id):
            for task in tasks.values():
                results[task] = await self.rest.cancel(task, credential=credential, user=user)
        return results
