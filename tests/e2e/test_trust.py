"""Who is asking, end to end on the dev stack: another member's token and a process
without a token cannot cancel Alice's Run, `guest` cannot even open the stack's
virtual host, and nothing changes; Alice can."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid

import aio_pika
import aiormq
import pytest

from metallo.common.v1 import common_pb2
from metallo.devstack.layout import Layout
from metallo.devstack.rabbitmq import CLI, broker_url, with_user
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, RequestClient, Topology
from tests.e2e.conftest import CREDENTIALS, ENV, METALLO, ROOT, metallo, publish

pytestmark = pytest.mark.e2e

ACTIONS = """version: 1
actions:
  nap:
    type: slurm-job
    command: [sleep, "600"]
    resources: {wallTimeSeconds: 900}
"""


def as_bob(*args: str) -> subprocess.CompletedProcess:
    """The CLI logged in as Bob (his own credentials file)."""
    env = {**ENV, "METALLO_CREDENTIALS_FILE": str(CREDENTIALS.with_name("bob.json"))}
    env.pop("METALLO_MEMBER")
    return subprocess.run([*METALLO, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


async def cancel_without_token(stack: dict, run_id: str) -> Rejected:
    """CancelRun naming Alice from a process with no token, logged in as the CLI's
    RabbitMQ user (a member client, which may not assert a member)."""
    url = broker_url(Layout.default(), stack["amqp_url"], CLI)
    async with RequestClient(url, Topology(prefix=stack.get("topology_prefix", ""))) as client:
        with pytest.raises(Rejected) as refused:
            await client.request(ec.CancelRun(metadata=common_pb2.CommandMetadata(
                command_id=str(uuid.uuid4()), acting_member="m-alice", project="demo"),
                run_id=run_id, reason="forged"), timeout=30)
    return refused.value


async def guest_is_refused(stack: dict) -> str:
    """What RabbitMQ answers ``guest`` logging in to the stack's virtual host."""
    with pytest.raises(aiormq.exceptions.AMQPError) as refused:
        await aio_pika.connect(with_user(stack["amqp_url"], "guest", "guest"), timeout=10)
    return str(refused.value)


def test_only_the_member_the_token_proves_may_cancel(local_stack, tmp_path):
    (tmp_path / "actions.yaml").write_text(ACTIONS)
    repository = publish(tmp_path, "e2e-trust")
    launched = metallo("action", "run", repository, "nap", "--output", "json", timeout=120)
    assert launched.code == 0, launched.stderr
    run_id = launched.json()["launch"]["run_id"]

    assert as_bob("dev", "login", "m-bob").returncode == 0
    mismatch = as_bob("run", "cancel", run_id, "--member", "m-alice", "--output", "json")
    assert mismatch.returncode == 2, mismatch.stderr
    assert "member-token-mismatch" in mismatch.stdout
    assert asyncio.run(cancel_without_token(local_stack, run_id)).code == "unauthenticated"
    assert "Connection.Close" in asyncio.run(guest_is_refused(local_stack))

    time.sleep(2)  # a cancellation that slipped through would be recorded by now
    run = metallo("run", "show", run_id, "--output", "json").json()
    assert run["desired_state"] != "cancel" and run["phase"] != "terminal", run
    cancelled = metallo("run", "cancel", run_id, "--reason", "e2e", "--output", "json")
    assert cancelled.code == 0 and cancelled.json()["cancel"]["cancel_recorded"] is True
