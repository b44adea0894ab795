"""jobs.sqlite commit points (adaptors/kubernetes/group_commit.py): outside a grouped
block every write commits; inside one, progress waits for ``durable()``, commits of
tasks awaiting together are one, and a result not yet durable is never replayed."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from site_runtime.adaptors.kubernetes.journal import KubernetesJournal


def journal(tmp_path) -> KubernetesJournal:
    j = KubernetesJournal(tmp_path / "jobs.sqlite")
    for a in ("a1", "a2", "a3"):
        j.insert_attempt(a, "r1", 1, {"material_digest": "sha256:x"}, "metallo-demo")
    return j


def on_disk(tmp_path, attempt_id: str) -> str | None:
    """The Attempt's state as another connection (a restarted Runtime) reads it."""
    conn = sqlite3.connect(tmp_path / "jobs.sqlite")
    try:
        row = conn.execute(
            "SELECT state FROM attempts WHERE attempt_id = ?", (attempt_id,)
        ).fetchone()
        return row[0] if row else None
    finally:
        conn.close()


def test_outside_a_grouped_block_every_write_commits(tmp_path):
    j = journal(tmp_path)
    before = j.commits
    j.set_state("a1", "stage-in")
    j.intent("a1", "compute", "Job", "mt-a1-run")
    j.save_result("c1", {"outcome": "succeeded"})
    assert j.commits - before == 3
    assert on_disk(tmp_path, "a1") == "stage-in" and j.result("c1") is not None


async def test_progress_waits_for_durable_and_a_pending_result_is_not_replayed(tmp_path):
    j = journal(tmp_path)
    before = j.commits
    with j.grouped():
        j.set_state("a1", "stage-in")
        j.ended("a1", "stage-in", 0, None, None)
        j.set_state("a1", "compute")
        j.intent("a1", "compute", "Job", "mt-a1-run")
        assert on_disk(tmp_path, "a1") == "prepared"  # nothing durable yet
        assert j.attempt("a1").state == "compute"  # the block reads its own writes
        await j.durable()
        assert on_disk(tmp_path, "a1") == "compute" and j.commits - before == 1
        j.created("a1", "compute", "uid-1")
        j.save_result("c1", {"outcome": "succeeded"})
        assert j.result("c1") is None  # not durable: never replayed
        await j.durable()
    assert j.commits - before == 2
    assert j.result("c1") == {"outcome": "succeeded"}
    assert j.object("a1", "compute").uid == "uid-1"


async def test_an_end_inside_a_grouped_block_commits_at_once(tmp_path):
    j = journal(tmp_path)
    with j.grouped():
        j.set_state("a1", "stage-in")
        j.set_state("a1", "failed", code="compute-failed")  # an end is a commit point
        assert on_disk(tmp_path, "a1") == "failed"


async def test_tasks_awaiting_durable_together_share_one_commit(tmp_path):
    j = journal(tmp_path)
    before = j.commits

    async def start(attempt_id: str) -> None:
        with j.grouped():
            j.set_state(attempt_id, "compute")
            j.intent(attempt_id, "compute", "Job", f"mt-{attempt_id}-run")
            await j.durable()
            assert on_disk(tmp_path, attempt_id) == "compute"

    await asyncio.gather(start("a1"), start("a2"), start("a3"))
    assert j.commits - before == 1


async def test_a_grouped_block_ended_by_an_error_commits_its_progress(tmp_path):
    j = journal(tmp_path)
    with pytest.raises(RuntimeError), j.grouped():
        j.set_state("a1", "stage-in")
        raise RuntimeError("deferred")
    assert on_disk(tmp_path, "a1") == "stage-in"
