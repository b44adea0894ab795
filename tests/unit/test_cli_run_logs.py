"""``metallo run logs``: the stage is checked first, the text is read through Execution Core
(ReadRunLog, then GetRunLogRead), and a missing Attempt points to ``run show`` — against the
real RabbitMQ with a stand-in for Execution Core (tests/unit/cli_support.py)."""

from __future__ import annotations

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, Topology
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
    run_cli,
)
from tests.unit.test_cli import RUN_ID


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def test_logs_validates_the_stage_first():
    result = run_cli("run", "logs", RUN_ID, "--stage", "everything")
    assert result.code == 2 and "stage-in, compute, stage-out" in result.stderr


async def test_logs_reads_through_execution_core_and_prints_the_text(amqp_url, topology):
    states = iter(["pending", "ready"])

    def read(q):
        state = next(states)
        return ec.RunLogRead(read_id=q.read_id, run_id=RUN_ID, attempt_number=1, stage="compute",
                             state=state, text="the data file is missing\n" if state == "ready" else "",
                             truncated=state == "ready")

    handlers = {"ReadRunLog": lambda c: ec.ReadRunLogReply(read_id="r-1", state="pending"),
                "GetRunLogRead": read}
    async with StandIn(amqp_url, topology, ("execution_core",), handlers) as s:
        ok = await cli("run", "logs", RUN_ID, "--max-bytes", "1000")
        handlers["GetRunLogRead"] = lambda q: ec.RunLogRead(
            read_id=q.read_id, state="refused", reason_code="authorisation-refused")
        refused = await cli("run", "logs", RUN_ID)
    assert ok.code == 0, ok.stderr
    assert ok.stdout == "the data file is missing\n"
    assert "only the last 25 bytes of the text are shown" in ok.stderr  # what it holds, not --max-bytes
    sent = s.received[0]
    assert (sent.run_id, sent.stage, sent.attempt_number, sent.max_bytes) == (RUN_ID, "compute", 0, 1000)
    assert refused.code == 2 and "authorisation-refused" in refused.stderr


async def test_logs_of_an_attempt_that_does_not_exist_point_to_run_show(amqp_url, topology):
    def missing(c):
        raise Rejected("not-found", f"Run {RUN_ID} has no Attempt 5")

    async with StandIn(amqp_url, topology, ("execution_core",), {"ReadRunLog": missing}):
        result = await cli("run", "logs", RUN_ID, "--attempt", "5")
    assert result.code == 3
    assert f"metallo run show {RUN_ID}" in result.stderr
