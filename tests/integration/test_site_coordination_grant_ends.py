"""Repository grants end with their Attempt (seed 001: grants limited to outstanding
Attempts): Execution Core's RunCompleted, through the real broker, makes Site
Coordination revoke the Run's outstanding grants; the lab Git server refuses a
grant of an ended Attempt even before it is revoked; none is issued afterwards."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, insert, select

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Outbox, OutboxRelay
from metallo.persistence.engine import session_factory
from site_coordination.adaptors.event_handlers import build_event_consumer
from site_coordination.adaptors.tables import ended_runs, repository_grants
from tests.integration.audit_support import audit_rows
from tests.integration.site_coordination_support import (
    OPERATOR_TOKEN,
    prepare_payload,
    result_for,
)
from tests.integration.test_site_coordination_git import Git, _seed_repository


async def _commit_and_push(git: Git, work, name: str, creds: dict) -> tuple[int, str]:
    (work / name).write_text(f"{name}\n")
    await git.run("add", name, cwd=work)
    await git.run("commit", "-q", "-m", name, cwd=work)
    return await git.run("push", git.url("demo.git"), "HEAD:main", cwd=work, **creds)


async def _stage_out(client, attempt_id: str) -> dict:
    r = await client.post(f"/v1/attempts/{attempt_id}/repository-grants",
                          json={"direction": "stage-out"})
    assert r.status_code == 201, r.text
    g = r.json()
    return {"grant_id": g["grant_id"], "user": g["username"], "password": g["token"]}


async def _revoked(edge, grant_id: str) -> bool:
    async with edge.engine.connect() as conn:
        return (await conn.execute(select(repository_grants.c.revoked_at).where(
            repository_grants.c.grant_id == grant_id))).scalar() is not None


async def test_a_finished_runs_stage_out_grant_cannot_push(edge, tmp_path, topology, bus_url):
    git = Git(edge, tmp_path)
    await _seed_repository(edge, git, "demo.git")
    await edge.append("prepare", run_id="run-1", attempt_id="att-1",
                      payload=prepare_payload(git.url("demo.git")))
    client = edge.client(await edge.grant())
    await client.get("/v1/commands/next")
    work = tmp_path / "work"
    stage_out = await _stage_out(client, "att-1")
    creds = {"user": stage_out["user"], "password": stage_out["password"]}
    code, out = await git.run("clone", "-q", git.url("demo.git"), str(work), **creds)
    assert code == 0, out
    code, out = await _commit_and_push(git, work, "during-the-run.txt", creds)
    assert code == 0, out

    consumer = build_event_consumer(edge.engine, bus_url("site_coordination"), topology)
    relay = OutboxRelay(edge.engine, bus_url("execution_core"), topology, owner="test-execution-core",
                        poll_seconds=0.1)
    await consumer.start()
    await relay.start()
    try:
        completed = ec.RunCompleted(run_id="run-1", project="demo", outcome="succeeded",
                                    attempts=1)
        outbox = Outbox(topology)
        async with session_factory(edge.engine).begin() as session:
            await outbox.publish_event(session, completed, aggregate_id="run:run-1")
            await outbox.publish_event(session, completed, aggregate_id="run:run-1")  # a repeat
        for _ in range(200):
            if await _revoked(edge, stage_out["grant_id"]):
                break
            await asyncio.sleep(0.05)
        assert await _revoked(edge, stage_out["grant_id"])
        ended = await audit_rows(edge.engine, action="repository-grant.revoke")
        assert [(r["summary"]["reason"], r["principal"], r["request_id"]) for r in ended] == [
            ("run-ended", "site_coordination", stage_out["grant_id"])]  # once, not per repeat
    finally:
        await relay.stop()
        await consumer.stop()

    code, out = await _commit_and_push(git, work, "after-the-run.txt", creds)
    assert code != 0 and "Authentication failed" in out, out
    r = await client.post("/v1/attempts/att-1/repository-grants", json={"direction": "stage-out"})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "attempt-completed")
    async with edge.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(ended_runs))).scalar() == 1
    # What stage-out pushed during the Run is kept; nothing after.
    code, out = await git.run("ls-remote", git.url("demo.git"), "main", user="operator",
                              password=OPERATOR_TOKEN)
    assert code == 0, out
    head = out.split()[0]
    code, local = await git.run("rev-parse", "HEAD~1", cwd=work)
    assert head == local.strip()


async def test_the_git_server_refuses_a_grant_of_an_ended_attempt_before_revocation(
        edge, tmp_path):
    git = Git(edge, tmp_path)
    await _seed_repository(edge, git, "demo.git")
    client = edge.client(await edge.grant())
    for run, attempt in (("run-a", "att-a"), ("run-b", "att-b")):
        await edge.append("prepare", run_id=run, attempt_id=attempt,
                          payload=prepare_payload(git.url("demo.git")))
    prepare_a = (await client.get("/v1/commands/next")).json()
    grants = {a: await _stage_out(client, a) for a in ("att-a", "att-b")}
    for attempt, g in grants.items():
        code, out = await git.run("clone", "-q", git.url("demo.git"), attempt,
                                  user=g["user"], password=g["password"])
        assert code == 0, out

    # A result that ends att-a: its grant stops working at once (and is revoked with it).
    r = await client.post(f"/v1/commands/{prepare_a['sequence']}/result",
                          json=result_for(prepare_a, phase="failed", outcome="succeeded"))
    assert r.status_code == 200, r.text
    # run-b's end is known (as from a RunCompleted racing the grant's issue).
    async with edge.engine.begin() as conn:
        await conn.execute(insert(ended_runs).values(run_id="run-b", outcome="cancelled"))
    assert await _revoked(edge, grants["att-a"]["grant_id"])
    # run-b's grant is refused by the Git server before anything revokes it.
    assert not await _revoked(edge, grants["att-b"]["grant_id"])
    for attempt, g in grants.items():
        code, out = await git.run("fetch", "-q", git.url("demo.git"), cwd=tmp_path / attempt,
                                  user=g["user"], password=g["password"])
        assert code != 0 and "Authentication failed" in out, (attempt, out)
