"""Batched repository-grant releases of the local executor (seed 000: a staging job's
access is revoked after it ends; ADR 0014). Real SQLite journal, fake edge port."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from site_runtime.adaptors.local.grant_releases import GrantReleases
from site_runtime.adaptors.local.jobs import LocalJobsJournal
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable


class BatchGrants:
    """A port with ``release_many``; answers from ``answers`` (default: revoked)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.answers: dict[str, str] = {}
        self.unavailable = False

    async def release_many(self, grant_ids: list[str]) -> dict[str, str]:
        self.calls.append(list(grant_ids))
        if self.unavailable:
            raise EdgeUnavailable("edge down", "repository-unavailable")
        return {g: self.answers.get(g, "revoked") for g in grant_ids}


class OneByOneGrants:
    """An older port: ``release`` only; a 403 for the ids in ``forbidden``."""

    def __init__(self, forbidden: set[str]) -> None:
        self.released: list[str] = []
        self.forbidden = forbidden

    async def release(self, grant_id: str) -> None:
        if grant_id in self.forbidden:
            raise EdgeRefused(403, "forbidden", "another stream's grant")
        self.released.append(grant_id)


@pytest.fixture
def journal(tmp_path):
    j = LocalJobsJournal(tmp_path / "jobs.sqlite")
    yield j
    j.close()


def ended_stage(journal: LocalJobsJournal, attempt: str, stage: str, grant_id: str) -> None:
    journal.insert_attempt(attempt, f"run-{attempt}", 1, {}, Path("/tmp"))
    journal.launch_intent(attempt, stage)
    journal.set_grant(attempt, stage, grant_id)
    journal.finish_stage(
        attempt, stage, "succeeded", exit_code=0, signal=None, code=None, output_commit=None
    )


def unreleased(journal: LocalJobsJournal) -> set[str]:
    return {g for _, _, g in journal.unreleased_grants(100)}


async def test_releases_wait_for_the_delay_then_go_in_one_request(journal):
    grants = BatchGrants()
    releases = GrantReleases(journal, grants, delay_seconds=0.2)  # type: ignore[arg-type]
    ended_stage(journal, "a1", "stage-in", "rg-1")
    releases.schedule()
    ended_stage(journal, "a2", "stage-in", "rg-2")
    ended_stage(journal, "a1", "stage-out", "rg-3")
    releases.schedule()  # a later schedule does not push the first one's time back
    assert await releases.flush_when_due() == 0 and grants.calls == []
    await asyncio.sleep(0.25)
    assert await releases.flush_when_due() == 3
    assert len(grants.calls) == 1 and sorted(grants.calls[0]) == ["rg-1", "rg-2", "rg-3"]
    assert unreleased(journal) == set()
    assert await releases.flush_when_due() == 0 and len(grants.calls) == 1  # nothing left


async def test_a_running_stage_keeps_its_grant(journal):
    grants = BatchGrants()
    releases = GrantReleases(journal, grants, delay_seconds=0)  # type: ignore[arg-type]
    journal.insert_attempt("a1", "run-a1", 1, {}, Path("/tmp"))
    journal.launch_intent("a1", "stage-in")
    journal.set_grant("a1", "stage-in", "rg-live")
    releases.schedule()
    assert await releases.flush_when_due() == 0 and grants.calls == []
    assert journal.stage("a1", "stage-in").grant_released is False


async def test_an_unreachable_edge_keeps_them_for_a_later_try(journal, monkeypatch):
    monkeypatch.setattr("site_runtime.adaptors.local.grant_releases.RETRY_SECONDS", 0.1)
    grants = BatchGrants()
    grants.unavailable = True
    releases = GrantReleases(journal, grants, delay_seconds=0)  # type: ignore[arg-type]
    ended_stage(journal, "a1", "stage-in", "rg-1")
    releases.schedule()
    assert await releases.flush_when_due() == 0
    assert unreleased(journal) == {"rg-1"}  # the journal still holds it
    grants.unavailable = False
    assert await releases.flush_when_due() == 0  # not yet: the retry waits
    await asyncio.sleep(0.15)
    assert await releases.flush_when_due() == 1 and unreleased(journal) == set()


async def test_answers_decide_per_grant(journal):
    grants = BatchGrants()
    grants.answers = {"rg-gone": "not-found", "rg-other": "forbidden"}
    releases = GrantReleases(journal, grants, delay_seconds=0)  # type: ignore[arg-type]
    for i, grant_id in enumerate(["rg-ok", "rg-gone", "rg-other"]):
        ended_stage(journal, f"a{i}", "stage-in", grant_id)
    releases.schedule()
    # not-found counts as released; forbidden can never succeed from here: not asked again.
    assert await releases.flush_when_due() == 3 and unreleased(journal) == set()


async def test_an_older_port_releases_one_by_one(journal):
    grants = OneByOneGrants(forbidden={"rg-2"})
    releases = GrantReleases(journal, grants, delay_seconds=0)  # type: ignore[arg-type]
    ended_stage(journal, "a1", "stage-in", "rg-1")
    ended_stage(journal, "a2", "stage-in", "rg-2")
    releases.schedule()
    assert await releases.flush_when_due() == 2
    assert grants.released == ["rg-1"] and unreleased(journal) == set()


class PickyGrants(BatchGrants):
    """Refuses any batch naming ``bad`` (as an edge whose provider cannot revoke it)."""

    def __init__(self, bad: str) -> None:
        super().__init__()
        self.bad = bad

    async def release_many(self, grant_ids: list[str]) -> dict[str, str]:
        self.calls.append(list(grant_ids))
        if self.unavailable:
            raise EdgeUnavailable("edge down", "repository-unavailable")
        if self.bad in grant_ids:
            raise EdgeRefused(422, "invalid-argument", "cannot revoke")
        return {g: "revoked" for g in grant_ids}


async def test_one_grant_the_edge_refuses_does_not_hold_back_the_others(journal):
    grants = PickyGrants(bad="rg-2")
    releases = GrantReleases(journal, grants, delay_seconds=0)  # type: ignore[arg-type]
    for i in (1, 2, 3):
        ended_stage(journal, f"a{i}", "stage-in", f"rg-{i}")
    releases.schedule()
    assert await releases.flush_when_due() == 2  # the batch, then one at a time
    assert unreleased(journal) == {"rg-2"}
    assert grants.calls[0] == ["rg-1", "rg-2", "rg-3"]  # journal order


async def test_an_unreachable_edge_is_not_asked_once_per_grant(journal):
    grants = PickyGrants(bad="none")
    grants.unavailable = True
    releases = GrantReleases(journal, grants, delay_seconds=0)  # type: ignore[arg-type]
    for i in (1, 2, 3):
        ended_stage(journal, f"a{i}", "stage-in", f"rg-{i}")
    releases.schedule()
    assert await releases.flush_when_due() == 0
    assert len(grants.calls) == 3  # the batch and two single ones, then it stops
    assert unreleased(journal) == {"rg-1", "rg-2", "rg-3"}


class FailingOnOne(BatchGrants):
    """The edge fails (5xx) whenever ``bad`` is named: its provider cannot revoke it."""

    def __init__(self, bad: str) -> None:
        super().__init__()
        self.bad = bad

    async def release_many(self, grant_ids: list[str]) -> dict[str, str]:
        self.calls.append(list(grant_ids))
        if self.bad in grant_ids:
            raise EdgeUnavailable("HTTP 502 provider-unavailable", "repository-unavailable")
        return {g: "revoked" for g in grant_ids}


async def test_one_grant_the_edge_always_fails_on_does_not_block_the_others(journal):
    grants = FailingOnOne(bad="rg-1")  # first in line: it used to stop every later release
    releases = GrantReleases(journal, grants, delay_seconds=0)  # type: ignore[arg-type]
    for i in (1, 2, 3):
        ended_stage(journal, f"a{i}", "stage-in", f"rg-{i}")
    releases.schedule()
    assert await releases.flush_when_due() == 2
    assert unreleased(journal) == {"rg-1"}


async def test_flush_sends_what_waits_before_it_is_due(journal):
    grants = BatchGrants()
    releases = GrantReleases(journal, grants, delay_seconds=60)  # type: ignore[arg-type]
    ended_stage(journal, "a1", "stage-out", "rg-1")
    releases.schedule()
    assert await releases.flush_when_due() == 0  # due in a minute
    assert await releases.flush() == 1  # a graceful stop sends it now
    assert unreleased(journal) == set()


async def test_an_error_while_releasing_never_leaves_the_executor(journal, tmp_path, caplog):
    """The supervision pass and observe call the flush outside any Attempt's guard:
    an unexpected error (here the journal's) is logged, not raised: raised, it would
    end the supervision task silently."""
    from site_runtime.adaptors.local.executor import LocalExecutor, LocalSettings

    executor = LocalExecutor(LocalSettings(workspace_root=tmp_path / "ws"), journal,
                             authority=BatchGrants(), grants=BatchGrants())  # type: ignore[arg-type]

    async def broken() -> int:
        raise RuntimeError("database is locked")

    executor.releases.flush_when_due = broken  # type: ignore[method-assign]
    await executor.releases.flush_due_logged()
    assert "releasing repository grants failed (RuntimeError)" in caplog.text
    executor.close()
