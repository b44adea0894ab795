"""Settling a Slurm submission whose answer was lost (docs/site-runtime.md, Recovery).

Stages are submitted *held* and released only once their job id is saved. After a
lost answer the executor lists the jobs that carry the stage's exact identity
(name, comment, account, user) and :func:`settle_submission` decides:

* one match → adopt it (still ``held``, or already released);
* several, all still pending (none ran) → keep the oldest, cancel
  the others first;
* several, some running or ended → ambiguous: progress stops (nothing is guessed);
* none → absent: slurmctld keeps every held job until it is released or cancelled,
  so the POST created nothing and the saved request may be sent again.

:func:`held_duplicates` finds the late duplicates a re-sent POST can leave behind.
Pure functions over :class:`~.slurm_jobs.NativeJob` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from site_runtime.domain.slurm_jobs import NativeIdentity, NativeJob


@dataclass(frozen=True)
class Settlement:
    """``verdict`` is ``adopt`` (``job``; ``held`` when it still waits for release),
    ``ambiguous`` or ``absent``; ``cancel`` names held duplicates to cancel first."""

    verdict: str
    job: NativeJob | None = None
    held: bool = False
    cancel: tuple[str, ...] = ()


def is_held(job: NativeJob) -> bool:
    """True for a job submitted held and not yet released (``JobHeldUser``)."""
    return job.state == "PENDING" and job.reason == "JobHeldUser"


def settle_submission(matches: Sequence[NativeJob]) -> Settlement:
    """Decide a lost submission from the jobs carrying its exact identity (module doc)."""
    cancel: tuple[str, ...] = ()
    if len(matches) > 1:
        waiting = [m for m in matches if m.state == "PENDING" and not m.terminal]
        if len(waiting) != len(matches):
            return Settlement("ambiguous")
        keep = min(matches, key=lambda m: int(m.job_id))
        cancel = tuple(m.job_id for m in matches if m.job_id != keep.job_id)
        matches = [keep]
    if len(matches) == 1:
        return Settlement("adopt", matches[0], is_held(matches[0]), cancel)
    return Settlement("absent")


def held_duplicates(
    identity: NativeIdentity, jobs: Iterable[NativeJob], saved_job_id: str | None
) -> list[str]:
    """Ids of held jobs that carry ``identity`` but are not the stage's saved job."""
    return [
        job.job_id
        for job in jobs
        if identity.matches(job) and job.job_id != saved_job_id and is_held(job)
    ]
