"""Who is asking, end to end on the dev stack: another member's token and a process
without a token cannot cancel Alice's Run, and nothing changes; Alice can."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid

import pytest

from metallo.common.v1 import common_pb2
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


async def cancel_without_token(run_id: str) -> Rejected:
    """CancelRun naming Alice from a process with no token (the lab's `guest` login)."""
    url = os.environ.get("METALLO_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    async with RequestClient(url, Topology()) as client:
        with pytest.raises(Rejected) as refused:
            await client.request(ec.CancelRun(metadata=common_pb2.CommandMetadata(
                command_id=str(uuid.uuid4()), acting_member="m-alice", project="demo"),
                run_id=run_id, reason="forged"), timeout=30)
    return refused.value


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
    assert asyncio.run(cancel_without_token(run_id)).code == "unauthenticated"

    time.sleep(2)  # a cancellation that slipped through would be recorded by now
    run = metallo("run", "show", run_id, "--output", "json").json()
    assert run["desired_state"] != "cancel" and run["phase"] != "terminal", run
    cancelled = metallo("run", "cancel", run_id, "--reason", "e2e", "--output", "json")
    assert cancelled.code == 0 and cancelled.json()["cancel"]["cancel_recorded"] is True
