"""Repository grants end with their Attempt, also within one Run (seed 001: grants are
limited to outstanding Attempts): a retried Run's first Attempt — ended by its result,
or superseded by the second without one (lost) — has its grants revoked by Site
Coordination and refused at the lab Git server, while the second Attempt's grant works.

Real broker (Execution Core's principal appends the Site commands over RabbitMQ to
Site Coordination's command server), real PostgreSQL, the real Site edge and lab Git
server, real git.
"""

from __future__ import annotations

import uuid

import pytest

from metallo.common.v1 import common_pb2
from metallo.messaging import OutboxRelay, RequestClient
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from site_coordination.adaptors.command_handlers import build_command_server
from site_coordination.domain.canonical import canonical_json
from tests.integration.site_coordination_support import prepare_payload, result_for
from tests.integration.test_site_coordination_git import Git, _seed_repository
from tests.integration.test_site_coordination_grant_ends import (
    _commit_and_push,
    _revoked,
    _stage_out,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def site(edge, bus_url, topology, tmp_path):
    """(edge, git, append) with Site Coordination's command server on the bus; ``append``
    sends ``prepare`` of an Attempt as Execution Core does."""
    server = build_command_server(edge.engine, bus_url("site_coordination"), topology)
    relay = OutboxRelay(edge.engine, bus_url("site_coordination"), topology,
                        owner="site_coordination", poll_seconds=0.05)
    core = RequestClient(bus_url("execution_core"), topology)
    await server.start()
    await relay.start()
    await core.start()
    git = Git(edge, tmp_path)
    await _seed_repository(edge, git, "demo.git")

    async def append(attempt_id: str, number: int) -> int:
        reply = await core.request(sc.AppendSiteCommand(
            metadata=common_pb2.CommandMetadata(command_id=uuid.uuid4().hex,
                                                acting_member="m-alice", project="demo"),
            site_id="lab-slurm", environment="slurm", kind="prepare", run_id="run-1",
            attempt_id=attempt_id, attempt_number=number,
            payload_json=canonical_json(prepare_payload(git.url("demo.git")))), timeout=30)
        return reply.sequence

    try:
        yield edge, git, append
    finally:
        await core.close()
        await relay.stop()
        await server.stop()


def creds(grant: dict) -> dict:
    return {"user": grant["user"], "password": grant["password"]}


async def _fetch(git: Git, work, grant: dict) -> tuple[int, str]:
    return await git.run("fetch", "-q", git.url("demo.git"), cwd=work, user=grant["user"],
                         password=grant["password"])


async def _pull_and_clone(runtime, git: Git, attempt_id: str, work) -> tuple[dict, dict, object]:
    """The Runtime pulls the Attempt's ``prepare``, takes a stage-out grant, clones."""
    command = (await runtime.get("/v1/commands/next")).json()
    assert command["attempt_id"] == attempt_id
    grant = await _stage_out(runtime, attempt_id)
    code, out = await git.run("clone", "-q", git.url("demo.git"), str(work), **creds(grant))
    assert code == 0, out
    return command, grant, work


@pytest.mark.parametrize("first_ends_by", ["its-failed-result", "the-retry-alone"])
async def test_a_retried_runs_first_attempt_grants_are_refused_the_seconds_work(
        site, tmp_path, first_ends_by):
    edge, git, append = site
    runtime = edge.client(await edge.grant())
    await append("att-1", 1)
    first, g1, work1 = await _pull_and_clone(runtime, git, "att-1", tmp_path / "work-1")
    # att-1 fails (a terminal result) or is only prepared and later given up (lost).
    phase = "failed" if first_ends_by == "its-failed-result" else "prepared"
    r = await runtime.post(f"/v1/commands/{first['sequence']}/result",
                           json=result_for(first, phase=phase))
    assert r.status_code == 200, r.text
    if first_ends_by == "its-failed-result":
        assert await _revoked(edge, g1["grant_id"])  # revoked at once, not at the Run's end
    else:
        assert not await _revoked(edge, g1["grant_id"])
        assert (await _fetch(git, work1, g1))[0] == 0  # att-1 still runs

    await append("att-2", 2)  # Execution Core retries the Run
    assert await _revoked(edge, g1["grant_id"])
    code, out = await _fetch(git, work1, g1)
    assert code != 0 and "Authentication failed" in out, out
    code, out = await _commit_and_push(git, work1, "from-att-1.txt", creds(g1))
    assert code != 0 and "Authentication failed" in out, out
    r = await runtime.post("/v1/attempts/att-1/repository-grants", json={"direction": "stage-out"})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "attempt-completed")

    _second, g2, work2 = await _pull_and_clone(runtime, git, "att-2", tmp_path / "work-2")
    code, out = await _commit_and_push(git, work2, "from-att-2.txt", creds(g2))
    assert code == 0, out
    assert not await _revoked(edge, g2["grant_id"])
    # A repeated append of att-1's era changes nothing for att-2.
    await append("att-1", 1)
    assert (await _fetch(git, work2, g2))[0] == 0
