"""``metallo run show|list|wait`` say why a Run waits and which stage its native state
belongs to; ``metallo run reconcile --mark-lost`` explains (dry run) or records —
against the real RabbitMQ with a stand-in for Execution Core (tests/unit/cli_support.py)."""

from __future__ import annotations

import json

import pytest

from metallo.cli.progress import run_line
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, Topology
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
    run_cli,
)

RUN_ID = "9b1c7f7e-5d43-4d55-9f0e-000000000002"


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def waiting_run(**fields) -> ec.Run:
    run = ec.Run(run_id=RUN_ID, project="demo", action="train", site_id="lab-slurm",
                 phase="queued", native_state="PENDING", observation_phase="queued",
                 observation_confidence="current")
    for name, value in fields.items():
        setattr(run, name, value)
    run.attempts.add(number=1, state="active", native_state=run.native_state)
    return run


@pytest.mark.parametrize(
    ("fields", "expected", "absent"),
    [
        ({"native_wait": "slurm-resources"}, "native PENDING · pending: waiting for resources", ""),
        ({"native_stage": "stage-out"}, "native stage-out PENDING", ""),
        ({"waiting_reason": "slurm-unavailable", "observation_confidence": "uncertain"},
         "native PENDING (uncertain) · Site: slurmrestd unreachable, retrying", ""),
        ({"native_stage": "compute", "native_wait": "slurm-held-admin"},
         "native compute PENDING · pending: held by a Site administrator", ""),
        ({"phase": "terminal", "outcome": "lost", "native_wait": "slurm-resources"},
         "outcome lost", "waiting for resources"),
    ],
)
def test_the_progress_line_says_the_stage_and_why_it_waits(fields, expected, absent):
    line = run_line(waiting_run(**fields))
    assert expected in line
    assert not absent or absent not in line


async def test_run_show_and_list_print_the_waiting_texts(amqp_url, topology):
    run = waiting_run(native_wait="slurm-qos-limit", native_stage="compute",
                      waiting_reason="slurm-observation-unavailable")
    handlers = {"GetRun": lambda q: run, "ListRuns": lambda q: ec.ListRunsReply(runs=[run])}
    async with StandIn(amqp_url, topology, ("execution_core",), handlers):
        shown = await cli("run", "show", RUN_ID)
        listed = await cli("run", "list")
        as_json = await cli("run", "show", RUN_ID, "-o", "json")
    text = " ".join(shown.stdout.split())
    assert shown.code == 0 and "compute PENDING" in text
    assert "Site: Slurm cannot be asked about the jobs right now, retrying" in text
    assert "pending: waiting: a quality-of-service limit is reached" in text
    listing = " ".join(listed.stdout.split())
    assert listed.code == 0 and "compute PENDING" in listing and "quality-of-service" in listing
    document = json.loads(as_json.stdout)
    assert (document["native_wait"], document["waiting_reason"], document["native_stage"]) == (
        "slurm-qos-limit", "slurm-observation-unavailable", "compute")


async def test_wait_exits_1_for_a_lost_run(amqp_url, topology):
    lost = waiting_run(phase="terminal", outcome="lost", reason_code="lost-at-site")
    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": lambda q: lost}):
        waited = await cli("run", "wait", RUN_ID)
    assert waited.code == 1 and "outcome lost (lost-at-site)" in waited.stdout + waited.stderr
    said = " ".join(waited.stderr.split())
    assert "Metallo did not stop it" in said and "check there before launching it again" in said


def test_list_accepts_the_new_outcomes_and_refuses_others():
    refused = run_cli("run", "list", "--outcome", "vanished")
    assert refused.code == 2 and "lost, timed-out" in refused.stderr


def test_reconcile_needs_a_decision_and_no_contradiction():
    assert run_cli("run", "reconcile", RUN_ID).code == 2
    both = run_cli("run", "reconcile", RUN_ID, "--mark-lost", "--yes", "--dry-run")
    assert both.code == 2 and "contradict" in both.stderr


async def test_reconcile_is_a_dry_run_unless_yes(amqp_url, topology):
    def answer(cmd):
        return ec.ReconcileRunReply(
            run_id=cmd.run_id, decision=cmd.decision, dry_run=cmd.dry_run, eligible=True,
            recorded=not cmd.dry_run, attempt_number=1,
            explanation="the Site answered 3 time(s) that it does not know Attempt 1")

    async with StandIn(amqp_url, topology, ("execution_core",), {"ReconcileRun": answer}) as s:
        dry = await cli("run", "reconcile", RUN_ID, "--mark-lost")
        real = await cli("run", "reconcile", RUN_ID, "--mark-lost", "--yes", "--reason", "node gone")
    assert dry.code == 0 and "dry run: nothing changed" in dry.stdout
    assert f"metallo run reconcile {RUN_ID} --mark-lost --yes" in dry.stdout
    assert real.code == 0 and "marked lost (audited)" in real.stdout
    first, second = s.received
    assert first.dry_run and first.decision == "mark-lost"
    assert not second.dry_run and second.reason == "node gone"
    assert second.metadata.acting_member == "m-alice"


async def test_reconcile_of_a_run_the_site_still_observes(amqp_url, topology):
    def refuse(cmd):
        if cmd.dry_run:
            return ec.ReconcileRunReply(run_id=cmd.run_id, dry_run=True, eligible=False,
                                        explanation="the Site still observes Attempt 1")
        raise Rejected("not-reconcilable", "the Site still observes Attempt 1")

    async with StandIn(amqp_url, topology, ("execution_core",), {"ReconcileRun": refuse}):
        dry = await cli("run", "reconcile", RUN_ID, "--mark-lost", "--dry-run")
        real = await cli("run", "reconcile", RUN_ID, "--mark-lost", "--yes")
    assert dry.code == 2 and "not allowed" in dry.stdout
    assert real.code == 2 and f"metallo run cancel {RUN_ID}" in real.stderr
