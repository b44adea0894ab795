"""``metallo run show`` / ``run list`` / ``run cancel``: what a member is told of a
Run's state, staleness, lost work and a quiet wait, against the real RabbitMQ with a
stand-in for Execution Core (tests/unit/cli_support.py)."""

from __future__ import annotations

import json

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Topology
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
)
from tests.unit.test_cli import RUN_ID, a_run


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


async def test_run_show_says_when_its_observation_is_stale(amqp_url, topology):
    def stale(q):
        run = a_run(phase="running", outcome="")
        run.observation_phase, run.observation_confidence = "running", "stale"
        return run

    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": stale}):
        shown = await cli("run", "show", RUN_ID)
    assert shown.code == 0
    assert "stale: the Site has not reported lately" in " ".join(shown.stdout.split())


async def test_a_cancel_the_site_cannot_deliver_says_the_native_work_may_go_on(amqp_url, topology):
    # The Site's Runtime does not know the Attempt: the stop waits, and if the Attempt
    # ends lost its native work is not stopped: the member is told, with the jobs.
    waiting = a_run("cancelling")
    waiting.waiting_reason = "attempt-unknown-at-site"
    lost = a_run("terminal", "lost")
    runs = {"now": waiting}
    handlers = {
        "CancelRun": lambda c: ec.CancelRunReply(run_id=c.run_id, cancel_recorded=True,
                                                 phase="cancelling"),
        "GetRun": lambda q: runs["now"],
    }
    async with StandIn(amqp_url, topology, ("execution_core",), handlers):
        asked = await cli("run", "cancel", RUN_ID)
        runs["now"] = lost
        handlers["CancelRun"] = lambda c: ec.CancelRunReply(run_id=c.run_id, phase="terminal",
                                                            outcome="lost")
        after = await cli("run", "cancel", RUN_ID, "-o", "json")
        shown = await cli("run", "show", RUN_ID)
    said = " ".join(asked.stderr.split())
    assert asked.code == 0 and "cancellation of" in asked.stdout
    assert "waits for a Runtime that knows it" in said and "NOT stopped" in said
    assert "stage-in=101 compute=102" in said and "scancel" in said
    warning = json.loads(after.stdout)["warning"]
    assert "Metallo did not stop it" in warning and "compute=102" in warning
    assert "Metallo did not stop it" in " ".join(shown.stderr.split())


async def test_run_views_say_what_is_known_and_quiet_ends_in_one_line(amqp_url, topology):
    accepted = a_run("accepted")
    accepted.action = ""  # planning has not read the Workload revision yet
    accepted.native_state = ""
    accepted.ClearField("attempts")
    refused = a_run("terminal", "failed")
    refused.attempts[0].state = "refused"
    refused.observation_phase = "prepared"
    refused.native_state = ""
    lost = a_run("terminal", "lost")
    lost.native_stage, lost.native_state, lost.observation_phase = "compute", "RUNNING", "running"
    lost.reason_code = "lost-at-site"
    for version, (phase, seen, second) in enumerate(
            [("queued", "queued", 10), ("running", "running", 20), ("terminal", "running", 30)],
            start=1):
        lost.history.add(version=version, phase=phase, observation_phase=seen).at.FromSeconds(
            1_800_000_000 + second)
    runs = {"accepted": accepted, "refused": refused, "lost": lost}
    handlers = {
        "GetRun": lambda q: runs[q.run_id],
        "ListRuns": lambda q: ec.ListRunsReply(runs=[accepted]),
        "CancelRun": lambda c: ec.CancelRunReply(run_id=c.run_id, phase="terminal",
                                                 outcome="lost"),
    }
    async with StandIn(amqp_url, topology, ("execution_core",), handlers):
        listed = await cli("run", "list")
        shown = {k: await cli("run", "show", k) for k in runs}
        quiet = await cli("run", "cancel", "lost", "--wait", "-q")
    assert "(planning)" in listed.stdout
    assert "(planning)" in shown["accepted"].stdout
    refused_text = " ".join(shown["refused"].stdout.split())
    assert "none (the Site refused the Attempt)" in refused_text and "prepared" not in refused_text
    lost_text = " ".join(shown["lost"].stdout.split())
    assert "compute RUNNING (last known, observed running since 2027-01-15T08:00:20+00:00)" in lost_text
    assert quiet.stdout.strip().splitlines()[-1] == f"{RUN_ID} lost (lost-at-site)"
    assert "Attempts" not in quiet.stdout and "native state" not in quiet.stdout


def test_the_native_column_reads_alike_for_every_executor():
    from metallo.cli.run_view import native_text
    from metallo.execution_core.v1 import execution_core_pb2 as ec

    local = ec.Run(phase="terminal", outcome="succeeded", native_stage="stage-out", native_state="COMPLETED")
    slurm = ec.Run(phase="terminal", outcome="succeeded", native_state="COMPLETED")
    assert native_text(local) == native_text(slurm) == "COMPLETED"
    running = ec.Run(phase="running", native_stage="compute", native_state="RUNNING")
    assert native_text(running) == "compute RUNNING"
