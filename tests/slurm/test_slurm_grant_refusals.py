"""A repository grant the edge refuses for good ends the Attempt instead of holding the
Site's ordered stream (a Run of a local path on the Slurm Site must not be deferred
forever with every later command of the Site waiting behind it)."""

from __future__ import annotations

import asyncio

import pytest

from site_runtime.application.delivery import EdgeRefused
from site_runtime.application.ports import Deferred
from tests.slurm.lab import (
    Driver,
    RecordingGrants,
    make_executor,
    make_repository,
    observe_until,
    payload,
    sacct_jobs,
    squeue_jobs,
)

pytestmark = pytest.mark.slurm


class RefusingGrants(RecordingGrants):
    """Refuses the grants of ``directions`` as the edge does (``status`` and ``code``)."""

    def __init__(self, directions: set[str], status: int = 409, code: str = "repository-not-served"):
        super().__init__()
        self.directions, self.status, self.code = directions, status, code
        self.refused: list[str] = []

    async def issue(self, attempt_id: str, direction: str):
        if direction in self.directions:
            self.refused.append(direction)
            raise EdgeRefused(self.status, self.code, "the lab Git server does not serve it")
        return await super().issue(attempt_id, direction)


@pytest.fixture
async def executor_with(slurm_lab, tmp_path, tokens):
    made = []

    def make(grants):
        ex = make_executor(tmp_path / f"state-{len(made)}", tokens, grants)
        made.append(ex)
        return ex

    yield make
    for ex in made:
        await ex.rest.close()
        ex.journal.close()


def jobs_of(attempt_id: str) -> list:
    return squeue_jobs(f"metallo-{attempt_id}") + sacct_jobs(f"metallo-{attempt_id}")


async def test_a_refused_stage_in_grant_refuses_the_start_and_submits_nothing(executor_with):
    grants = RefusingGrants({"stage-in"})
    executor = executor_with(grants)
    url, commit, _ = make_repository()
    drv = Driver()
    assert (await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))).outcome == "succeeded"
    start = drv.command("start")
    started = await executor.start(start)
    assert (started.outcome, started.code) == ("refused", "repository-not-served")
    assert "edge refused the stage-in job's repository grant" in started.message
    again = await executor.start(start)  # the same command again: the saved answer
    assert (again.outcome, again.code) == ("refused", "repository-not-served")
    assert grants.refused == ["stage-in"]  # asked once
    observed = await executor.observe(drv.command("observe"))
    assert observed.observation["phase"] == "failed"
    assert observed.observation["failure"]["code"] == "repository-not-served"
    assert observed.observation["failure"]["stage"] == "stage-in"
    await asyncio.sleep(1)
    assert jobs_of(drv.attempt_id) == []  # Slurm never saw a job


async def test_a_refused_stage_out_grant_fails_the_attempt_after_compute(executor_with):
    grants = RefusingGrants({"stage-out"})
    executor = executor_with(grants)
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    assert (await executor.start(drv.command("start"))).outcome == "succeeded"
    final = await observe_until(executor, drv, {"succeeded", "failed", "cancelled"})
    assert final.observation["phase"] == "failed"
    assert final.observation["failure"]["code"] == "repository-not-served"
    assert final.observation["failure"]["stage"] == "stage-out"
    assert grants.refused == ["stage-out"] and len(grants.issued) == 1
    assert grants.released == [grants.issued[0].grant_id]  # stage-in's grant went back


async def test_a_refusal_without_the_edges_code_is_still_a_deferral(executor_with):
    # A 4xx that is not the edge's own answer (no code: a proxy in front of it during a
    # deploy, say) may pass: the start waits and goes on afterwards.
    grants = RefusingGrants({"stage-in"}, status=404, code="edge-refused")
    executor = executor_with(grants)
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    start = drv.command("start")
    with pytest.raises(Deferred) as deferred:
        await executor.start(start)
    assert deferred.value.code == "repository-unavailable"
    grants.directions = set()  # the operator renewed the grant
    started = await executor.start(start)
    assert started.outcome == "succeeded"
    final = await observe_until(executor, drv, {"succeeded", "failed", "cancelled"})
    assert final.observation["phase"] == "succeeded"
