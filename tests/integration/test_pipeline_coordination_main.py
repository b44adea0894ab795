"""``python -m pipeline_coordination``: the wired process migrates, serves, coordinates and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from metallo.common.v1 import common_pb2
from metallo.messaging import Rejected, RequestClient, ServiceUnavailable
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def test_served_process_starts_a_pipeline_and_reports_an_absent_portfolio(make_database, bus_url, topology):
    url = await make_database("pipeline_coordination")  # the process migrates it itself
    env = {
        **os.environ,
        "METALLO_PIPELINE_COORDINATION_DATABASE_URL": url,
        "METALLO_AMQP_URL": bus_url("pipeline_coordination"),
        "METALLO_TOPOLOGY_PREFIX": topology.prefix,
        "METALLO_GOVERNANCE_FILE": str(ROOT / "examples" / "governance.yaml"),
        "METALLO_PIPELINE_COORDINATION_POLL_SECONDS": "0.1",
        "METALLO_PIPELINE_COORDINATION_REQUEST_TIMEOUT_SECONDS": "2",
        # A production composition: https to the listed Git host only, no local repositories.
        "METALLO_GIT_HOSTS": "gitlab.example.org",
        "METALLO_LOCAL_REPOSITORIES": "",
    }
    # The process declares these; the topology fixture deletes them afterwards.
    for q in (
        topology.command_queue("pipeline_coordination"),
        topology.query_queue("pipeline_coordination"),
        topology.event_queue("pipeline_coordination"),
    ):
        topology.declared_queues.update({q, f"{q}.retry", f"{q}.dlq"})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pipeline_coordination", "serve", env=env, cwd=str(ROOT),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    client = RequestClient(bus_url("go_api"), topology)
    await client.start()
    try:
        start = pb.StartPipeline(
            metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member="m-alice", project="demo"),
            repository_url="https://gitlab.example.org/nonexistent/demo.git",
            branch="main",
        )
        reply = None
        for _ in range(120):  # until the process has declared its queues
            try:
                reply = await client.request(start, timeout=30)
                break
            except ServiceUnavailable:
                assert proc.returncode is None, (await proc.stderr.read()).decode()
                await asyncio.sleep(0.5)
        assert reply is not None and reply.state == "preparing"
        for refused, code in (("https://169.254.169.254/latest/meta-data/x.git",
                               "repository-host-not-allowed"),
                              ("/nonexistent/demo.git", "repository-local-not-allowed")):
            with pytest.raises(Rejected) as e:
                await client.request(pb.StartPipeline(
                    metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()),
                                                        acting_member="m-alice", project="demo"),
                    repository_url=refused, branch="main"), timeout=30)
            assert e.value.code == code, refused

        get = pb.GetPipeline(
            metadata=common_pb2.QueryMetadata(acting_member="m-alice", project="demo"), pipeline_id=reply.pipeline_id
        )
        # No Workload Portfolio runs here: the coordinator keeps the Pipeline
        # preparing and says why, rather than failing it.
        for _ in range(200):
            try:
                got = await client.request(get, timeout=10)
            except ServiceUnavailable:  # its query queue may come up after its command queue
                await asyncio.sleep(0.1)
                continue
            if got.last_error:
                break
            await asyncio.sleep(0.1)
        assert got.state == "preparing" and "workload_portfolio" in got.last_error

        with pytest.raises(Rejected) as e:
            await client.request(
                pb.GetPipeline(metadata=get.metadata, pipeline_id=str(uuid.uuid4())), timeout=10
            )
        assert e.value.code == "not-found"
        for malformed in ("bad", str(uuid.uuid4()).upper(), uuid.uuid4().hex):
            with pytest.raises(Rejected) as e:
                await client.request(
                    pb.GetPipeline(metadata=get.metadata, pipeline_id=malformed), timeout=10
                )
            assert e.value.code == "invalid-argument", malformed  # a wrong request, exit 2
    finally:
        await client.close()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 30)
    assert rc == 0, (await proc.stderr.read()).decode()
