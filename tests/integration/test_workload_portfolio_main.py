"""``python -m workload_portfolio``: the wired process serves PrepareAction and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from metallo.common.v1 import common_pb2
from metallo.messaging import RequestClient, ServiceUnavailable
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.unit.workload_portfolio_repos import ACTIONS, make_repo
from workload_portfolio.__main__ import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def test_served_process_prepares_an_action(tmp_path, make_database, bus_url, topology):
    repo = tmp_path / "repo"
    head = make_repo(repo, {"actions.yaml": ACTIONS})
    url = await make_database("workload_portfolio")  # the process migrates it itself
    env = {
        **os.environ,
        "METALLO_WORKLOAD_PORTFOLIO_DATABASE_URL": url,
        "METALLO_AMQP_URL": bus_url("workload_portfolio"),
        "METALLO_TOPOLOGY_PREFIX": topology.prefix,
        "METALLO_GOVERNANCE_FILE": str(ROOT / "examples" / "governance.yaml"),
        "METALLO_LOCAL_REPOSITORIES": "allow",  # the repository is a local path here
    }
    # the process declares these; the topology fixture deletes them afterwards
    for q in (topology.command_queue("workload_portfolio"), topology.query_queue("workload_portfolio")):
        topology.declared_queues.update({q, f"{q}.retry", f"{q}.dlq"})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workload_portfolio", "serve", env=env, cwd=str(ROOT),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    client = RequestClient(bus_url("go_api"), topology)
    await client.start()
    try:
        cmd = wp.PrepareAction(
            metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member="m-alice",
                                                project="demo"),
            repository_url=str(repo), branch="main", action="train")
        reply = None
        for _ in range(120):  # wait until the process has declared its queues
            try:
                reply = await client.request(cmd, timeout=30)
                break
            except ServiceUnavailable:
                assert proc.returncode is None, (await proc.stderr.read()).decode()
                await asyncio.sleep(0.5)
        assert reply is not None
        assert (reply.revision, reply.commit, reply.environment, reply.created) == (1, head, "slurm", True)
    finally:
        await client.close()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0


def test_check_command_reports_every_problem(tmp_path, capsys):
    good = tmp_path / "actions.yaml"
    good.write_text(ACTIONS)
    assert main(["check", str(good)]) == 0
    assert "4 action(s): train, evaluate, app, serve" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nactions:\n  a: {type: k8s-job}\n  b: {type: x, command: [y]}\n")
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:6: actions.a: 'command' is a required property" in err
    assert f"{bad}:4:13: actions.b.type:" in err
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read the file" in capsys.readouterr().err
    assert main(["check", str(tmp_path)]) == 2
