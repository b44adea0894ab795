"""Two replicas of every service, one of each killed with SIGKILL at random moments and
restarted, while 50 Runs and a two-step Pipeline run on the local executor (ADR 0034).

The stack is real processes on the test's own databases and bus namespace
(``replica_stack``), not the shared dev stack, so it runs beside other suites. The
seed is printed and taken from ``METALLO_CHAOS_SEED`` to replay a failure.

Checked afterwards, from each owner's database and the Runtime's journals:
every Run and the Pipeline ended; each Run completed once (one ``RunCompleted`` row in
Execution Core's outbox) and got one Attempt; each Site command is in the stream once
with one result, and the Runtime journaled and launched each stage once (no duplicate
native work); every outbox drained and no queue dead-lettered anything (no message lost).
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import tempfile
import uuid
from pathlib import Path

import aio_pika
import pytest
from sqlalchemy import text

from metallo.cli.settings import Actor
from metallo.cli.transport import command_metadata
from metallo.devstack.gitrepo import publish
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, RequestClient
from metallo.persistence.engine import create_engine
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.integration.replica_stack import SERVICES, ReplicaStack

pytestmark = pytest.mark.integration

RUNS = 50
KILLS_PER_SERVICE = 2
DEADLINE_SECONDS = 420.0
WHO = Actor(member="m-alice", project="demo")
ACTIONS = """version: 1
actions:
  noop:
    type: slurm-job
    command: ["true"]
    resources: {cpus: 1, memoryMiB: 64, wallTimeSeconds: 120}
  first:
    type: slurm-job
    command: {shell: "echo first > first.txt"}
    resources: {wallTimeSeconds: 120}
  second:
    type: slurm-job
    command: {shell: "cat first.txt > second.txt"}
    needs: [first]
    resources: {wallTimeSeconds: 120}
"""


@pytest.fixture
async def stack(make_database, amqp_url, bus_url, topology, tmp_path):
    urls = {s: await make_database(s) for s in SERVICES}  # each replica migrates at start
    for service in SERVICES:
        for q in (topology.command_queue(service), topology.query_queue(service),
                  topology.event_queue(service)):
            topology.declared_queues.update({q, f"{q}.retry", f"{q}.dlq"})
    stack = ReplicaStack(tmp_path, amqp_url, topology, urls, bus_url=bus_url)
    try:
        await stack.start()
        yield stack
    finally:
        await stack.stop()


async def request(client: RequestClient, message, timeout: float = 20.0, tries: int = 8):
    """``client.request`` retried with the same command id while the owner's replica that
    took it died before answering (a replay returns the saved outcome)."""
    for attempt in range(tries):
        try:
            return await client.request(message, timeout=timeout)
        except Rejected:
            raise
        except Exception:  # noqa: BLE001 - no answer (yet): the same command again
            if attempt == tries - 1:
                raise
            await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


async def chaos(stack: ReplicaStack, service: str, rng: random.Random, stop: asyncio.Event,
                said: list[str]) -> None:
    """Kill one replica of ``service`` at a random moment, restart it once killed, up to
    KILLS_PER_SERVICE times while the work runs."""
    for _ in range(KILLS_PER_SERVICE):
        try:
            await asyncio.wait_for(stop.wait(), rng.uniform(2.0, 12.0))
            return
        except TimeoutError:
            pass
        victim = stack.processes[rng.choice(stack.replica_names(service))]
        await stack.kill(victim)
        said.append(f"killed {victim.name}")
        await asyncio.sleep(rng.uniform(0.2, 3.0))
        await stack.spawn(victim)
        await stack.ready(victim)


async def _rows(url: str, sql: str) -> list:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return list((await conn.execute(text(sql))).all())
    finally:
        await engine.dispose()


async def _settled(stack: ReplicaStack, pipeline_id: str, run_ids: list[str]) -> bool:
    ec_url, pc_url = stack.database_urls["execution_core"], stack.database_urls["pipeline_coordination"]
    ids = ",".join(f"'{r}'" for r in run_ids)
    open_runs = await _rows(ec_url, f"SELECT count(*) FROM runs WHERE phase <> 'terminal'"
                                    f" AND run_id IN ({ids})")
    pipeline = await _rows(pc_url, f"SELECT state FROM pipelines WHERE pipeline_id = '{pipeline_id}'")
    return open_runs[0][0] == 0 and pipeline and pipeline[0][0] in ("succeeded", "failed", "stopped")


async def _dead_lettered(amqp_url: str, topology) -> dict[str, int]:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        found = {}
        for service in SERVICES:
            for q in (topology.command_queue(service), topology.query_queue(service),
                      topology.event_queue(service)):
                try:
                    queue = await channel.declare_queue(f"{q}.dlq", passive=True)
                except aio_pika.exceptions.ChannelClosed:
                    channel = await connection.channel()
                    continue
                found[f"{q}.dlq"] = queue.declaration_result.message_count
        return found


@pytest.mark.timeout(DEADLINE_SECONDS + 180)
async def test_runs_and_a_pipeline_survive_kill_9_of_every_services_replicas(stack, amqp_url,
                                                                              bus_url, topology):
    seed = int(os.environ.get("METALLO_CHAOS_SEED") or random.SystemRandom().randrange(10**6))
    print(f"chaos seed {seed}")
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "actions.yaml").write_text(ACTIONS)
        url, _commit = await asyncio.to_thread(
            publish, Path(tmp), f"replicas-{uuid.uuid4().hex[:8]}", edge_url=stack.edge_url,
            layout=stack.layout)
    client = RequestClient(bus_url("go_api"), topology)
    await client.start()
    stop = asyncio.Event()
    said: list[str] = []
    try:
        prepared = await request(client, wp.PrepareAction(
            metadata=command_metadata(WHO), repository_url=url, branch="main", action="noop"),
            timeout=60)
        chaos_tasks = [asyncio.create_task(chaos(stack, s, rng, stop, said)) for s in SERVICES]
        started = await request(client, pc.StartPipeline(
            metadata=command_metadata(WHO), repository_url=url, branch="main",
            actions=["first", "second"]))
        limit = asyncio.Semaphore(8)

        async def launch() -> str:
            async with limit:
                reply = await request(client, ec.LaunchRun(
                    metadata=command_metadata(WHO), workload_id=prepared.workload_id,
                    revision=prepared.revision))
                return reply.run_id

        run_ids = await asyncio.gather(*(launch() for _ in range(RUNS)))
        assert len(set(run_ids)) == RUNS
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_SECONDS
        while not await _settled(stack, started.pipeline_id, run_ids):
            assert loop.time() < deadline, f"not settled after {DEADLINE_SECONDS:.0f} s; {said}"
            await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*chaos_tasks)
    finally:
        stop.set()
        await client.close()
    print("; ".join(said))
    assert sum(p.kills for p in stack.processes.values()) >= len(SERVICES), said
    await assert_once_each(stack, run_ids, started.pipeline_id)
    await assert_nothing_lost(stack, amqp_url, topology)


async def assert_once_each(stack: ReplicaStack, run_ids: list[str], pipeline_id: str) -> None:
    ec_url = stack.database_urls["execution_core"]
    pc_url = stack.database_urls["pipeline_coordination"]
    sc_url = stack.database_urls["site_coordination"]
    steps = await _rows(pc_url, f"SELECT action, run_id FROM pipeline_steps"
                                f" WHERE pipeline_id = '{pipeline_id}' ORDER BY step_index")
    assert [a for a, _ in steps] == ["first", "second"] and all(r for _, r in steps), steps
    everyone = [*run_ids, *(r for _, r in steps)]
    ids = ",".join(f"'{r}'" for r in everyone)
    runs = dict(await _rows(ec_url, f"SELECT run_id, outcome FROM runs WHERE run_id IN ({ids})"))
    assert len(runs) == len(everyone)
    assert set(runs.values()) == {"succeeded"}, runs
    pipeline = await _rows(pc_url, f"SELECT state FROM pipelines WHERE pipeline_id = '{pipeline_id}'")
    assert pipeline[0][0] == "succeeded"
    completed = await _rows(ec_url, "SELECT aggregate_id, count(*) FROM outbox_messages WHERE"
                                    " type = 'metallo.execution_core.v1.RunCompleted'"
                                    " GROUP BY aggregate_id")
    assert {a: n for a, n in completed if n != 1} == {}
    assert {a.removeprefix("run:") for a, _ in completed} >= set(everyone)
    attempts = await _rows(ec_url, "SELECT run_id, count(*) FROM attempts GROUP BY run_id")
    assert {r: n for r, n in attempts if r in runs and n != 1} == {}
    # Each (attempt, kind, ordinal) once, each command once in the stream with one result.
    doubled = await _rows(ec_url, "SELECT attempt_id, kind, ordinal FROM site_commands"
                                  " GROUP BY attempt_id, kind, ordinal HAVING count(*) > 1")
    assert doubled == []
    sc = await _rows(sc_url, "SELECT count(*), count(DISTINCT command_id),"
                             " count(DISTINCT sequence), count(result_json) FROM site_commands")
    (commands, distinct, sequences, results), = sc
    assert commands == distinct == sequences == results, sc
    journal = stack.layout.runtime / "local"
    delivery = sqlite3.connect(f"{(journal / 'delivery.sqlite').as_uri()}?mode=ro", uri=True)
    jobs = sqlite3.connect(f"{(journal / 'jobs.sqlite').as_uri()}?mode=ro", uri=True)
    try:
        journaled = delivery.execute("SELECT count(*), count(DISTINCT command_id) FROM commands"
                                     ).fetchone()
        launches = jobs.execute("SELECT attempt_id, stage, launches FROM stages").fetchall()
        native_attempts = jobs.execute("SELECT run_id, count(*) FROM attempts GROUP BY run_id"
                                       ).fetchall()
    finally:
        delivery.close()
        jobs.close()
    assert journaled[0] == journaled[1] == commands, (journaled, commands)
    assert [row for row in launches if row[2] != 1] == []
    assert {r: n for r, n in native_attempts if n != 1} == {}
    assert {r for r, _ in native_attempts} >= set(everyone)


async def assert_nothing_lost(stack: ReplicaStack, amqp_url: str, topology) -> None:
    for service in SERVICES:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            pending = await _rows(stack.database_urls[service],
                                  "SELECT count(*) FROM outbox_dispatch WHERE state = 'pending'")
            if pending[0][0] == 0 or loop.time() > deadline:
                break
            await asyncio.sleep(1.0)
        assert pending[0][0] == 0, f"{service}: {pending[0][0]} outbox rows not published"
        # Only a reply whose requester is gone may be given up ('dead'), never an event
        # or a command.
        dead = await _rows(stack.database_urls[service],
                           "SELECT m.type FROM outbox_dispatch d JOIN outbox_messages m"
                           " ON m.id = d.message_pk WHERE d.state = 'dead' AND m.kind <> 'reply'")
        assert dead == [], f"{service}: {dead}"
    parked = await _dead_lettered(amqp_url, topology)
    assert parked and {q: n for q, n in parked.items() if n} == {}
