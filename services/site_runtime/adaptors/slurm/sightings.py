"""Asking slurmctld and slurmdbd about a stage's job, each on its own, and reconciling
the answers with the saved facts (:mod:`site_runtime.domain.slurm_reconcile`).

The queue is one shared job list per cycle: a job not in it is absent from
slurmctld. A list that failed for any reason but a refused connection is
``unavailable`` (the accounting look-up still runs); a refused connection is a
Site-wide condition and passes through (every command would wait for it). An
accounting look-up is ``absent`` only on slurmdbd's exact unknown-job answers;
any other trouble is ``unavailable``.
"""

from __future__ import annotations

from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm.rest import SlurmRest, SlurmUncertain, SlurmUnreachable
from site_runtime.domain.slurm_jobs import JobList, NativeIdentity
from site_runtime.domain.slurm_reconcile import (
    ABSENT,
    UNASKED,
    Deadlines,
    Reconciled,
    Sighting,
    reconcile,
)


async def queue_jobs(rest: SlurmRest, *, credential: MemberCredential, user: str) -> JobList | None:
    """slurmctld's job list; None when it could not be read (SlurmUnreachable passes)."""
    try:
        return await rest.list_jobs(credential=credential, user=user)
    except SlurmUncertain:
        return None


def in_queue(jobs: JobList | None, job_id: str) -> Sighting:
    """The queue's sighting of ``job_id`` in a read list (``unavailable`` for None)."""
    if jobs is None:
        return UNASKED
    job = jobs.by_id.get(job_id)
    return Sighting.of(job) if job is not None else Sighting(ABSENT)


async def in_accounting(
    rest: SlurmRest, job_id: str, *, credential: MemberCredential, user: str
) -> Sighting:
    """slurmdbd's sighting of ``job_id``: found, absent (exact unknown-job) or unavailable."""
    try:
        return Sighting.of(await rest.accounting_job(job_id, credential=credential, user=user))
    except (SlurmUncertain, SlurmUnreachable):
        return UNASKED


async def reconcile_job(
    rest: SlurmRest,
    *,
    job_id: str,
    saved: dict | None,
    jobs: JobList | None,
    identity: NativeIdentity,
    credential: MemberCredential,
    user: str,
    now: float,
    deadlines: Deadlines,
    requeues: int = 0,
) -> Reconciled:
    """Reconcile one stage's job: accounting is asked only when the queue's list does
    not show the job (it left slurmctld, or the list could not be read); ``requeues``
    is the stage's requeue bound."""
    queue = in_queue(jobs, job_id)
    accounting = UNASKED
    if queue.status != "found":
        accounting = await in_accounting(rest, job_id, credential=credential, user=user)
    return reconcile(saved, queue, accounting, identity, now, deadlines, requeues=requeues)
