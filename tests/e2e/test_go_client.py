"""The Go client of the contract against the dev stack (local executor): it prepares
an action, launches a Run, replays the LaunchRun's exact bytes, reuses its
command_id with another input and reads the Run with GetRun until it ends — all
over RabbitMQ with its own reply queue, from code generated from contracts/proto."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.e2e.conftest import ENV, ROOT, publish
from tests.go_client import build_go_client

pytestmark = pytest.mark.e2e

ACTIONS = """version: 1
actions:
  go-noop:
    type: slurm-job
    command: ["true"]
"""


def test_go_client_launches_and_reads_a_run(local_stack, scratch_repo, tmp_path):
    binary = build_go_client(tmp_path / "gopath")
    url = publish(scratch_repo(ACTIONS), "go-client")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("METALLO_")},
           "METALLO_AMQP_URL": local_stack["amqp_url"],
           "METALLO_TOPOLOGY_PREFIX": local_stack.get("topology_prefix", "")}
    done = subprocess.run(
        [str(binary), "-fixtures", str(ROOT / "contracts" / "fixtures"), "-repository-url", url,
         "-action", "go-noop", "-member", ENV["METALLO_MEMBER"], "-project", ENV["METALLO_PROJECT"],
         "-run-timeout", "240s"],
        env=env, capture_output=True, text=True, timeout=400, check=False)
    report = json.loads(done.stdout)
    assert done.returncode == 0, (report, done.stderr)
    assert report["ok"] is True and report["fixtures_decoded"] > 0
    assert report["replay_same_outcome"] is True
    assert report["conflict_code"] == "idempotency-conflict"
    assert report["phase"] == "terminal" and report["outcome"] == "succeeded"
    assert report["run_id"] and report["workload_id"] and report["revision"] >= 1
