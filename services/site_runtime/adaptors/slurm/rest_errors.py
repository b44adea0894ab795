"""What slurmrestd access answers other than success (docs/site-runtime.md, Codes): a
definite refusal, a limit for now, an unreachable slurmrestd, or an uncertain outcome.
No message carries the token, scheduler text or a response body."""

from __future__ import annotations


class SlurmAccessError(Exception):
    """Base of slurmrestd outcomes other than success."""


class SlurmRefused(SlurmAccessError):
    """A definite refusal: slurmctld created nothing. ``code`` is ``slurm-error-<n>``."""

    def __init__(self, error_number: int) -> None:
        super().__init__(f"slurmctld refused the job (error {error_number})")
        self.error_number = error_number
        self.code = f"slurm-error-{error_number}"


class SlurmJobRequeueable(SlurmRefused):
    """The submitted job's record says slurmctld may requeue it although the request
    disabled requeueing: it is cancelled before release and the stage refused."""

    def __init__(self) -> None:
        SlurmAccessError.__init__(self, "the submitted job is requeueable")
        self.error_number = 0
        self.code = "slurm-job-requeueable"


class SlurmLimited(SlurmAccessError):
    """Turned away for now before creation (2050); submit again later."""

    code = "slurm-submission-limited"


class SlurmUnreachable(SlurmAccessError):
    """slurmrestd refused the connection: nothing was sent."""

    code = "slurm-unavailable"


class SlurmUncertain(SlurmAccessError):
    """The request may or may not have taken effect."""

    code = "slurm-observation-unavailable"
