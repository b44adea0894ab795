"""A helper Pod's kept log (adaptors/kubernetes/logs.py): saved once before the Pod's
delete, its tail when long, read with the offsets of a live log; a log the API cannot
serve now defers the delete. The journal is the real ``jobs.sqlite``; the Pod log API
answers from a table here (tests/k8s/test_kubernetes_helper_logs.py runs the lab's)."""

from __future__ import annotations

import pytest

from site_runtime.adaptors.kubernetes import logs
from site_runtime.adaptors.kubernetes.api import KubeError
from site_runtime.adaptors.kubernetes.journal import KubernetesJournal
from site_runtime.adaptors.kubernetes.logs import PodLogReads, _cut
from site_runtime.application.ports import Deferred


class PodLogs:
    """The Pod log API: each Pod's bytes, or the KubeError it answers."""

    def __init__(self, answers: dict[str, bytes | KubeError]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def log(self, namespace: str, pod: str, container: str | None, limit: int) -> bytes:
        self.asked.append(pod)
        answer = self.answers[pod]
        if isinstance(answer, KubeError):
            raise answer
        return answer[:limit]


@pytest.fixture
def journal(tmp_path):
    j = KubernetesJournal(tmp_path / "jobs.sqlite")
    j.insert_attempt("a-1", "r-1", 1, {}, "ns")
    for role in ("stage-in", "stage-out", "compute"):
        j.intent("a-1", role, "Job" if role == "compute" else "Pod", f"pod-{role}")
        j.created("a-1", role, f"uid-{role}")
    yield j
    j.close()


async def test_a_helper_log_is_kept_once_and_other_objects_not_at_all(journal):
    api = PodLogs({"pod-stage-in": b"checked out\n", "pod-compute": b"never read"})
    reads = PodLogReads(api, journal)
    row = journal.attempt("a-1")
    await reads.keep(row, journal.object("a-1", "stage-in"))
    api.answers["pod-stage-in"] = b"changed"
    await reads.keep(row, journal.object("a-1", "stage-in"))  # kept already: not asked again
    await reads.keep(row, journal.object("a-1", "compute"))
    assert journal.kept_log("a-1", "stage-in") == (0, b"checked out\n")
    assert journal.kept_log("a-1", "compute") is None and api.asked == ["pod-stage-in"]


async def test_a_pod_that_never_started_keeps_an_empty_log(journal):
    reads = PodLogReads(PodLogs({"pod-stage-out": KubeError(400, None, "log")}), journal)
    await reads.keep(journal.attempt("a-1"), journal.object("a-1", "stage-out"))
    assert journal.kept_log("a-1", "stage-out") == (0, b"")


async def test_an_api_that_cannot_serve_the_log_defers_the_delete(journal):
    reads = PodLogReads(PodLogs({"pod-stage-in": KubeError(503, None, "log")}), journal)
    with pytest.raises(Deferred):
        await reads.keep(journal.attempt("a-1"), journal.object("a-1", "stage-in"))
    assert journal.kept_log("a-1", "stage-in") is None


async def test_a_long_log_keeps_its_tail_with_the_offset_it_starts_at(journal, monkeypatch):
    monkeypatch.setattr(logs, "MAX_KEPT_BYTES", 4)
    reads = PodLogReads(PodLogs({"pod-stage-in": b"0123456789"}), journal)
    await reads.keep(journal.attempt("a-1"), journal.object("a-1", "stage-in"))
    assert journal.kept_log("a-1", "stage-in") == (6, b"6789")


def test_reads_of_a_kept_log_answer_like_a_live_log():
    assert _cut(0, b"line-one\n", 100, None) == (b"line-one\n", 0, 9)
    assert _cut(0, b"line-one\n", 4, None) == (b"one\n", 5, 9)
    assert _cut(0, b"line-one\n", 3, 5) == (b"one", 5, 9)
    assert _cut(0, b"line-one\n", 3, 50) == (b"", 9, 9)
    # A kept tail: what lies before it reads from where it starts.
    assert _cut(6, b"6789", 2, 0) == (b"67", 6, 10)
    assert _cut(6, b"6789", 2, 8) == (b"89", 8, 10)
    assert _cut(6, b"6789", 3, None) == (b"789", 7, 10)
