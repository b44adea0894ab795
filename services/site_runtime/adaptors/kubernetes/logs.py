"""``read-log`` of a Kubernetes Attempt: a stage's Pod log under the viewer's read permit
(docs/site-runtime.md, Kubernetes; ``application/log_reads.py``: ten seconds, 5 MiB).

The compute log is the ``compute`` container of the Job's Pod, a helper stage's its
helper Pod's; a Pod not started yet or already gone reads as an empty log. The Pod
log API has no byte offsets: a read with ``offset`` fetches ``offset + max_bytes``
bytes from the start, a tail read at most 32 MiB, and keeps what was asked for.

A helper Pod is deleted when its Attempt is cleaned up (or cancelled), and its log
with it: before the delete is sent, :meth:`PodLogReads.keep` saves the log in
``jobs.sqlite`` (its last :data:`MAX_KEPT_BYTES` bytes, with the offset they start at),
and a helper stage's read answers from the kept log from then on. A log the API cannot
serve at that moment defers the delete (it is tried again), so no log is lost to it.
"""

from __future__ import annotations

from site_runtime.adaptors.kubernetes.api import KubeApi, KubeError
from site_runtime.adaptors.kubernetes.journal import AttemptRow, KubernetesJournal, ObjectRow
from site_runtime.adaptors.kubernetes.objects import uncertain
from site_runtime.application.log_reads import ReadPermits, permitted_read
from site_runtime.application.ports import CommandResult, SiteCommand
from site_runtime.domain.kubernetes_names import LABEL_ATTEMPT, LABEL_STAGE, label_value

STAGES = ("stage-in", "compute", "stage-out")
HELPERS = ("stage-in", "stage-out")
MAX_TAIL_FETCH = 32 * 1024 * 1024
MAX_KEPT_BYTES = 5 * 1024 * 1024  # what a read may answer at most (log_reads.MAX_LOG_BYTES)


class PodLogReads:
    """Reads stage logs from the Pod log API (as the Runtime, which may read them)."""

    def __init__(self, api: KubeApi, journal: KubernetesJournal) -> None:
        self.api = api
        self.journal = journal

    async def read(self, command: SiteCommand, permits: ReadPermits | None) -> CommandResult:
        """The ``read-log`` answer (refusals: ``unknown-stage``, ``log-unavailable`` and
        those of :func:`permitted_read`)."""
        stage = str(command.payload.get("stage", "compute"))
        row = self.journal.attempt(command.attempt_id)
        assert row is not None  # the command prologue refused an unknown Attempt
        if stage not in STAGES:
            return CommandResult(command.command_id, "refused", "unknown-stage", "no such stage")

        async def span(name: str, max_bytes: int, offset: int | None) -> tuple[bytes, int, int]:
            kept = self.journal.kept_log(row.attempt_id, stage) if stage in HELPERS else None
            if kept is not None:
                return _cut(*kept, max_bytes, offset)
            obj = self.journal.object(row.attempt_id, stage)
            if obj is None or obj.state != "created":
                return b"", 0, 0
            pod = obj.name if stage in HELPERS else await self._job_pod(row)
            if pod is None:
                return b"", 0, 0
            limit = (offset + max_bytes) if offset is not None else MAX_TAIL_FETCH
            container = stage if stage in HELPERS else "compute"
            try:
                data = await self.api.log(row.namespace, pod, container, limit)
            except KubeError as error:
                if error.status in (400, 404):  # not started yet, or gone: nothing to read
                    return b"", 0, 0
                raise OSError(str(error)) from None
            return _cut(0, data, max_bytes, offset)

        try:
            return await permitted_read(command, permits, span)
        except OSError:
            return CommandResult(
                command.command_id,
                "refused",
                "log-unavailable",
                "the Kubernetes API cannot serve the log now",
            )

    async def keep(self, row: AttemptRow, obj: ObjectRow) -> None:
        """Save a helper Pod's log before the Pod is deleted (the module doc); nothing
        for another object, or when a log is kept already. Raises Deferred when the API
        cannot serve the log now: the delete waits and is tried again."""
        if obj.role not in HELPERS or obj.kind != "Pod" or not obj.uid:
            return
        if self.journal.kept_log(row.attempt_id, obj.role) is not None:
            return
        try:
            data = await self.api.log(row.namespace, obj.name, obj.role, MAX_TAIL_FETCH)
        except KubeError as error:
            if error.status not in (400, 404):  # 400: never started; 404: already gone
                raise uncertain(error, f"log {obj.name}") from None
            data = b""
        tail = data[-MAX_KEPT_BYTES:]
        self.journal.keep_log(row.attempt_id, obj.role, len(data) - len(tail), tail)

    async def _job_pod(self, row: AttemptRow) -> str | None:
        """The newest Pod of the Attempt's Job, by its labels."""
        selector = f"{LABEL_ATTEMPT}={label_value(row.attempt_id)},{LABEL_STAGE}=compute"
        pods = [
            p
            for p in await self.api.list("Pod", selector)
            if p["metadata"].get("namespace") == row.namespace
        ]
        pods.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
        return pods[-1]["metadata"]["name"] if pods else None


def _cut(start: int, data: bytes, max_bytes: int, offset: int | None) -> tuple[bytes, int, int]:
    """``(text, its offset, the log's size)`` of a read of ``data``, the log from byte
    ``start`` on: from ``offset`` (not before ``start``), else its last ``max_bytes``."""
    size = start + len(data)
    if offset is not None:
        at = min(max(offset, start), size)
        return data[at - start : at - start + max_bytes], at, size
    tail = data[-max_bytes:] if max_bytes else b""
    return tail, size - len(tail), size
