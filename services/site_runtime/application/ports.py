"""Ports of the Site Runtime (DESIGN.md, Site Runtime; seed 004 §4C; seed 001).

The worker pulls :class:`SiteCommand` values from the Site edge, journals them,
hands them to an executor and records the :class:`CommandResult` it returns.
JSON shapes: ``docs/site-commands.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class SiteCommand:
    """One numbered command of a Site stream, exactly as pulled from the edge."""

    sequence: int
    command_id: str
    kind: str  # prepare | start | observe | cancel | apply | terminate | read-log
    site_id: str
    environment: str  # "slurm" | "k8s"
    run_id: str
    attempt_id: str
    attempt_number: int
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class CommandResult:
    """The exact result of one command, saved before it is reported.

    ``outcome`` is ``succeeded`` or ``refused`` (a definite refusal with ``code``).
    ``observation`` follows docs/site-commands.md (phase, native_state, exit_code,
    signal, failure, output_commit, endpoint, observed_at).
    """

    command_id: str
    outcome: str
    code: str | None = None
    message: str | None = None
    native_jobs: list[dict[str, Any]] = field(default_factory=list)
    observation: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The result as the JSON object recorded at the edge."""
        return asdict(self)


class Deferred(Exception):
    """The command cannot progress yet; report ``code`` (catalogued) and keep it pending.

    Raised by executors, e.g. ``Deferred("slurm-submission-limited")``.
    ``retry_after`` (seconds), when given, caps the worker's back-off for this
    deferral: a condition the executor knows will clear soon (a local slot
    freeing) is retried sooner than the exponential delay would.
    """

    def __init__(self, code: str, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.retry_after = retry_after


class QueuedBatchExecutor(Protocol):
    """Executor of the ``queued-batch`` family (seed 004, Workload families).

    Every method is idempotent for the same command and must never create a second
    native effect for the same Attempt stage (seed 000, Recovery).
    """

    async def prepare(self, command: SiteCommand) -> CommandResult:
        """Prepare the Attempt from the saved ``prepare`` payload (workspace, checks).

        Returns ``succeeded`` or a definite ``refused`` with a ``code`` (nothing native
        exists then); raises :class:`Deferred` when it cannot progress yet.
        """
        ...

    async def start(self, command: SiteCommand) -> CommandResult:
        """Submit the prepared Attempt's native work, at most once per Attempt stage.

        Returns ``succeeded`` with ``native_jobs`` or a definite ``refused``; raises
        :class:`Deferred` (e.g. ``slurm-submission-limited``) to keep the command pending.
        """
        ...

    async def observe(self, command: SiteCommand) -> CommandResult:
        """Report the Attempt's current native state as ``observation``.

        May advance a staged Attempt (start the next stage once its predecessor
        completed). ``observation.phase`` is one of docs/site-commands.md's phases
        (``unknown`` when the native system could not be asked).
        """
        ...

    async def cancel(self, command: SiteCommand) -> CommandResult:
        """Stop the Attempt's native work; a finished or unknown Attempt is left as it is.

        The actual native state is then learned by a later ``observe`` (seed 004 §7C).
        """
        ...

    async def recover(self, command: SiteCommand) -> CommandResult:
        """Finish a command journaled as in flight before a restart, without duplicating it."""
        ...

    async def read_log(self, command: SiteCommand) -> CommandResult:
        """Answer a ``read-log`` command with a bounded read of the Attempt's logs.

        Reads only under the viewer's current read permit (seed 001, Private Run log
        commands), at most the permit's ``max_bytes`` (≤ 5 MiB); a definite refusal is
        a ``refused`` result with its ``code``.
        """
        ...


class NativeEndNotice(Protocol):
    """Tells the Site edge that an Attempt's native work ended (ADR 0016): a hint that
    makes Execution Core observe the Attempt at once, never evidence — the ``observe``
    that follows reports what happened. ``adaptors/edge_client.py``'s
    ``EdgeClient.notice_native_end`` implements it (``POST
    /v1/attempts/{attempt_id}/native-end``); the result is not used."""

    def __call__(self, attempt_id: str) -> Awaitable[object]:
        ...
