"""Workload revisions are kept for a while per (project, member, workload, revision)
(one GetWorkloadRevision per revision, not per launch)."""

from __future__ import annotations

import pytest

from execution_core.adaptors.workload_portfolio import PortfolioRevisions
from execution_core.application.ports import RevisionNotFound
from metallo.messaging import Rejected
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp


class FakeClient:
    """Answers GetWorkloadRevision with a revision, or refuses when told to."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str, int]] = []
        self.refuse: str | None = None

    async def request(self, query, timeout: float):
        self.asked.append(
            (query.metadata.project, query.metadata.acting_member, query.workload_id, query.revision)
        )
        if self.refuse:
            raise Rejected(self.refuse, "refused")
        return wp.WorkloadRevision(
            workload_id=query.workload_id,
            project=query.metadata.project,
            revision=query.revision,
            action="train",
            spec_json='{"command": ["true"]}',
        )


async def test_a_second_ask_within_the_ttl_is_answered_from_memory():
    client = FakeClient()
    revisions = PortfolioRevisions(client, cache_seconds=60)  # type: ignore[arg-type]
    first = await revisions.get("demo", "m-alice", "w1", 3)
    again = await revisions.get("demo", "m-alice", "w1", 3)
    assert again == first and first.spec == {"command": ["true"]}
    assert client.asked == [("demo", "m-alice", "w1", 3)]
    # Another member, revision or Project is asked for anew.
    await revisions.get("demo", "m-bob", "w1", 3)
    await revisions.get("demo", "m-alice", "w1", 4)
    await revisions.get("other", "m-alice", "w1", 3)
    assert len(client.asked) == 4


async def test_refusals_are_not_kept():
    client = FakeClient()
    revisions = PortfolioRevisions(client, cache_seconds=60)  # type: ignore[arg-type]
    client.refuse = "permission-denied"
    with pytest.raises(RevisionNotFound):
        await revisions.get("demo", "m-alice", "w1", 3)
    client.refuse = None
    assert (await revisions.get("demo", "m-alice", "w1", 3)).revision == 3
    assert len(client.asked) == 2


async def test_cache_seconds_zero_asks_every_time():
    client = FakeClient()
    revisions = PortfolioRevisions(client, cache_seconds=0)  # type: ignore[arg-type]
    await revisions.get("demo", "m-alice", "w1", 3)
    await revisions.get("demo", "m-alice", "w1", 3)
    assert len(client.asked) == 2


async def test_each_caller_gets_its_own_spec():
    client = FakeClient()
    revisions = PortfolioRevisions(client, cache_seconds=60)  # type: ignore[arg-type]
    first = await revisions.get("demo", "m-alice", "w1", 3)
    first.spec["command"].append("changed")
    again = await revisions.get("demo", "m-alice", "w1", 3)
    assert again.spec == {"command": ["true"]} and len(client.asked) == 1


def test_the_cache_can_be_turned_off_from_the_environment():
    from execution_core.application.settings import Settings

    off = Settings.from_env({"METALLO_EXECUTION_CORE_WORKLOAD_CACHE_SECONDS": "0"})
    assert off.workload_cache_seconds == 0
    with pytest.raises(ValueError, match="must be positive"):
        Settings.from_env({"METALLO_EXECUTION_CORE_BATCH": "0"})
