"""Ports of the Site Runtime (docs/site-runtime.md, How the Runtime is built).

The worker pulls :class:`SiteCommand` values from the Site edge, journals them,
hands them to an executor and records the :class:`CommandResult` it returns.
JSON shapes: ``docs/site-commands.md``.

An executor implements one family's Protocol, or both:

* :class:`QueuedBatchExecutor` — ``prepare`` / ``start`` / ``observe`` / ``cancel``
  (Slurm jobs, local processes, Kubernetes Jobs);
* :class:`ReconciledServiceExecutor` — ``apply`` / ``observe`` / ``terminate``
  (Kubernetes Deployments and inference services).

Both also answer ``read-log`` and ``recover``. The worker dispatches each command
kind to the method of the Protocol the executor implements
(:func:`command_handlers`); the shared prologue of every command (saved-result
replay, per-Attempt lock, ``attempt-not-prepared``, ``recover``) is
:class:`~site_runtime.application.journaled.JournaledExecutor`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SiteCommand:
    """One numbered command of a Site stream, exactly as pulled from the edge."""

    sequence: int
    command_id: str
    kind: str  # prepare | start | start-array | observe | cancel | apply | terminate | read-log
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


#: One command handler: the command in, its exact result out (or Deferred raised).
CommandHandler = Callable[[SiteCommand], Awaitable[CommandResult]]

#: Command kinds of each Workload family (docs/site-commands.md).
QUEUED_BATCH_KINDS = ("prepare", "start", "start-array", "observe", "cancel", "read-log")
RECONCILED_SERVICE_KINDS = ("apply", "observe", "terminate", "read-log")


@runtime_checkable
class QueuedBatchExecutor(Protocol):
    """Executor of the ``queued-batch`` family (docs/site-runtime.md, How a command is handled).

    Every method is idempotent for the same command and must never create a second
    native effect for the same Attempt stage (docs/site-runtime.md, Recovery).
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

        The actual native state is then learned by a later ``observe`` (docs/site-runtime.md, Recovery).
        """
        ...

    async def recover(self, command: SiteCommand) -> CommandResult:
        """Finish a command journaled as in flight before a restart, without duplicating it."""
        ...

    async def read_log(self, command: SiteCommand) -> CommandResult:
        """Answer a ``read-log`` command with a bounded read of the Attempt's logs.

        Reads only under the viewer's current read permit (docs/site-commands.md, ``read-log``; Private Run log
        commands), at most the permit's ``max_bytes`` (≤ 5 MiB); a definite refusal is
        a ``refused`` result with its ``code``.
        """
        ...


@runtime_checkable
class ReconciledServiceExecutor(Protocol):
    """Executor of the ``reconciled-service`` family: a long-running service kept in
    its applied shape until terminated (docs/site-commands.md, ``apply`` / ``terminate``).

    Same duties as :class:`QueuedBatchExecutor`: idempotent per command, never a
    second native effect for the same Attempt, exact results saved before return.
    """

    async def apply(self, command: SiteCommand) -> CommandResult:
        """Create or converge the Attempt's native service from the saved payload.

        Returns ``succeeded`` (with ``native_jobs`` naming what was applied) or a
        definite ``refused`` with a ``code``; raises :class:`Deferred` to keep it pending.
        """
        ...

    async def observe(self, command: SiteCommand) -> CommandResult:
        """Report the service's current native state as ``observation`` (``endpoint``
        once ready; ``unknown`` phase when the native system could not be asked)."""
        ...

    async def terminate(self, command: SiteCommand) -> CommandResult:
        """Remove the Attempt's native service; ``message`` is ``accepted``,
        ``already-terminal`` or ``not-found``. The end state is learned by ``observe``."""
        ...

    async def recover(self, command: SiteCommand) -> CommandResult:
        """Finish a command journaled as in flight before a restart, without duplicating it."""
        ...

    async def read_log(self, command: SiteCommand) -> CommandResult:
        """Answer ``read-log`` under the viewer's read permit, as for queued-batch."""
        ...


@runtime_checkable
class ArrayStarting(Protocol):
    """A queued-batch executor that starts an array group's children as native arrays
    (``start-array``, docs/site-commands.md; ADR 0032)."""

    async def start_array(self, command: SiteCommand) -> CommandResult:
        """Submit every prepared child of the group at once, at most once per group;
        ``succeeded`` with ``observation.array_tasks`` or a definite ``refused``."""
        ...


#: What the worker accepts: an executor of either family, or of both.
SiteExecutor = QueuedBatchExecutor | ReconciledServiceExecutor

ARRAY_UNSUPPORTED = "array-unsupported"


async def _arrays_unsupported(command: SiteCommand) -> CommandResult:
    """``start-array`` at an executor without native arrays: refused, nothing touched
    (Execution Core then starts the children one by one, or fails them)."""
    return CommandResult(
        command.command_id,
        "refused",
        ARRAY_UNSUPPORTED,
        "this Site's executor does not submit native arrays",
    )


def command_handlers(executor: SiteExecutor) -> dict[str, CommandHandler]:
    """``{command kind: bound method}`` for the families ``executor`` implements.

    Raises TypeError for an object that implements neither Protocol (a wiring error).
    """
    handlers: dict[str, CommandHandler] = {}
    if isinstance(executor, QueuedBatchExecutor):
        handlers.update(
            {
                "prepare": executor.prepare,
                "start": executor.start,
                "observe": executor.observe,
                "cancel": executor.cancel,
                "read-log": executor.read_log,
                "start-array": executor.start_array
                if isinstance(executor, ArrayStarting)
                else _arrays_unsupported,
            }
        )
    if isinstance(executor, ReconciledServiceExecutor):
        handlers.update(
            {
                "apply": executor.apply,
                "observe": executor.observe,
                "terminate": executor.terminate,
                "read-log": executor.read_log,
            }
        )
    if not handlers:
        raise TypeError(f"{type(executor).__name__} implements no executor Protocol")
    return handlers


@runtime_checkable
class Supervising(Protocol):
    """An executor with background work of its own (the local executor advances its
    stage processes between commands); the Runtime starts and stops it around the worker."""

    async def start_supervision(self) -> None:
        """Start the background work (idempotent)."""
        ...

    async def stop_supervision(self) -> None:
        """Stop it; native work keeps running and is adopted at the next start."""
        ...


@runtime_checkable
class Closing(Protocol):
    """An executor that holds resources to release when the Runtime stops
    (``close`` may be a coroutine function)."""

    def close(self) -> object:
        """Release them; native work keeps running."""
        ...


class NativeEndNotice(Protocol):
    """Tells the Site edge that an Attempt's native work ended (ADR 0016): a hint that
    makes Execution Core observe the Attempt at once, never evidence — the ``observe``
    that follows reports what happened. ``adaptors/edge/client.py``'s
    ``EdgeClient.notice_native_end`` implements it (``POST
    /v1/attempts/{attempt_id}/native-end``); the result is not used."""

    def __call__(self, attempt_id: str) -> Awaitable[object]: ...
