"""A Runtime newer than its Site edge: an edge whose strict request model does not
know the authorisation's optional ``repository_grant`` answers 422, and the local
executor goes back to two requests instead of failing the Attempt."""

from __future__ import annotations

import pytest

from site_coordination.adaptors.edge import schemas
from tests.integration.site_coordination_support import start_harness
from tests.integration.site_runtime_support import batch_payload, new_runtime, seed_repository


class _RequestBeforeGrants(schemas._Strict):
    """The execution authorisation request before ``repository_grant`` existed."""

    run_id: schemas.Id
    attempt_id: schemas.Id
    material_digest: str
    member_id: schemas.Id
    site_username: schemas.Short
    account: schemas.Short

    @property
    def repository_grant(self) -> None:  # what that edge never read
        return None


@pytest.fixture
async def older_edge(make_database, tmp_path, namespace, monkeypatch):
    monkeypatch.setattr(schemas, "ExecutionAuthorisationRequest", _RequestBeforeGrants)
    harness = await start_harness(make_database, tmp_path, namespace)
    yield harness
    await harness.stop()
    await harness.engine.dispose()


async def test_an_older_edge_gets_two_requests_and_the_run_goes_on(older_edge, tmp_path):
    edge = older_edge
    url, commit = await seed_repository(edge, tmp_path)
    runtime = await new_runtime(edge, tmp_path)
    try:
        for attempt in ("att-1", "att-2"):
            payload = batch_payload(url, commit, {"argv": ["true"]})
            await runtime.handle(await edge.append("prepare", payload=payload, attempt_id=attempt))
            started = await runtime.handle(await edge.append("start", attempt_id=attempt))
            assert started["outcome"] == "succeeded", started
        assert runtime.executor.authorisation.combines_grants is False  # asked once, then not again
    finally:
        await runtime.close()
