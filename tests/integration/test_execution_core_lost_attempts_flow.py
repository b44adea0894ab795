"""Lost Attempts, mark-lost, waiting reasons and confidence on real PostgreSQL and
RabbitMQ (docs/runs.md, Lost Attempts; Waiting codes). Site Coordination is a double
at the message level that answers as a Site Runtime does for an Attempt it does not
know: ``refused`` with ``attempt-not-prepared``."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected
from tests.integration.execution_core_support import (
    FAST,
    batch_spec,
    cmd_meta,
    happy_batch,
    query_meta,
    result,
    revision,
    stack_factory,
)

pytestmark = pytest.mark.integration

# A short reconciliation period so the rule is seen end to end.
LOST_FAST = dataclasses.replace(
    FAST, first_observe_seconds=0.1, lost_after_seconds=2.0, lost_observe_max_seconds=0.4
)


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


def forgetting(runs_forgotten: set[str]):
    """A Site that accepts the start, then no longer knows the Attempts of these Runs
    (its Runtime's state was removed); every other Attempt runs as happy_batch."""

    def script(cmd, double):
        if cmd.kind == "observe" and (cmd.run_id in runs_forgotten or "*" in runs_forgotten):
            if cmd.attempt_number == 1:
                return result(cmd, "refused", "attempt-not-prepared",
                              "the Attempt was not prepared at this Site")
        return happy_batch(cmd, double)

    return script


async def _active(stack) -> int:
    async with stack.engine.connect() as conn:
        return (
            await conn.execute(
                text("SELECT count(*) FROM runs WHERE phase NOT IN ('accepted', 'terminal')")
            )
        ).scalar_one()


async def test_an_attempt_the_site_forgets_ends_lost_after_the_period_and_frees_its_slot(
    make_stack,
):
    forgotten: set[str] = set()
    stack = await make_stack(settings=LOST_FAST, script=forgetting(forgotten))
    # One concurrent Run in the Project: the second launch waits for the first's slot.
    gov = stack.governance.read_text().replace("concurrent_run_limit: 10", "concurrent_run_limit: 1")
    stack.governance.write_text(gov)
    stack.portfolio.add(revision("w-retry", 1, spec=batch_spec(retry={"maxAttempts": 3})))
    lost_id = await stack.launch("w-retry", 1)
    forgotten.add(lost_id)
    waiting = await stack.wait_for(
        lost_id, lambda r: r.waiting_reason == "attempt-unknown-at-site", timeout=20
    )
    assert waiting.phase != "terminal" and waiting.observation_confidence == "uncertain"
    queued_id = await stack.launch()  # held by the concurrent-Run limit meanwhile
    await asyncio.sleep(0.5)
    queued = await stack.get(queued_id)
    assert (queued.phase, queued.waiting_reason) == ("accepted", "concurrent-run-limit")
    assert await _active(stack) == 1

    run = await stack.terminal(lost_id, timeout=30)
    assert (run.outcome, run.reason_code) == ("lost", "lost-at-site")
    (attempt,) = run.attempts  # maxAttempts 3, but a lost Attempt is not retried
    assert attempt.state == "lost" and attempt.reason_code == "lost-at-site"
    assert run.waiting_reason == ""
    observes = stack.site.count(attempt.attempt_id, "observe")
    assert observes >= 3  # it kept asking, with back-off
    assert observes < 2.0 / 0.1  # … not at the first-observe rate throughout
    (done,) = await stack.wait_events(pb.RunCompleted, lost_id)
    assert (done.outcome, done.reason_code) == ("lost", "lost-at-site")
    # The slot is free: the waiting launch is planned and runs.
    assert (await stack.terminal(queued_id, timeout=30)).outcome == "succeeded"
    # The reconciliation period ran from the first unknown answer to the end.
    async with stack.engine.connect() as conn:
        first_unknown, ended = (
            await conn.execute(
                text(
                    "SELECT min(c.result_at), max(r.ended_at) FROM site_commands c"
                    " JOIN runs r USING (run_id) WHERE c.run_id = :r AND c.code = 'attempt-not-prepared'"
                ),
                {"r": lost_id},
            )
        ).one()
    assert (ended - first_unknown).total_seconds() >= 2.0


async def test_a_lost_attempt_is_retried_when_the_action_opts_in(make_stack):
    stack = await make_stack(settings=LOST_FAST, script=forgetting({"*"}))
    stack.portfolio.add(
        revision("w-onlost", 1, spec=batch_spec(retry={"maxAttempts": 2, "onLost": True}))
    )
    run = await stack.terminal(await stack.launch("w-onlost", 1), timeout=30)
    assert (run.outcome, run.reason_code) == ("succeeded", "completed")
    assert [(a.number, a.state, a.reason_code) for a in run.attempts] == [
        (1, "lost", "lost-at-site"),
        (2, "succeeded", "completed"),
    ]


async def test_mark_lost_dry_run_changes_nothing_and_the_real_decision_is_audited(make_stack):
    slow = dataclasses.replace(LOST_FAST, lost_after_seconds=600)
    stack = await make_stack(settings=slow, script=forgetting({"*"}))
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: r.waiting_reason == "attempt-unknown-at-site", timeout=20)

    def reconcile(dry_run: bool, member: str = "m-alice") -> pb.ReconcileRun:
        return pb.ReconcileRun(metadata=cmd_meta(member), run_id=run_id, decision="mark-lost",
                               dry_run=dry_run, reason="the node was reinstalled")

    dry = await stack.client.request(reconcile(True), timeout=15)
    assert dry.dry_run and dry.eligible and not dry.recorded
    assert "does not know Attempt 1" in dry.explanation and "no new Attempt follows" in dry.explanation
    before = await stack.get(run_id)
    assert before.phase != "terminal"
    async with stack.engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM run_decisions"))).scalar_one() == 0

    real = await stack.client.request(reconcile(False), timeout=15)
    assert real.recorded and not real.dry_run and real.attempt_number == 1
    run = await stack.terminal(run_id, timeout=15)
    assert (run.outcome, run.reason_code) == ("lost", "marked-lost")
    assert run.attempts[0].state == "lost"
    async with stack.engine.begin() as conn:
        row = (
            await conn.execute(text("SELECT actor, decision, reason, evidence FROM run_decisions"
                                    " WHERE run_id = :r"), {"r": run_id})
        ).one()
    assert (row.actor, row.decision, row.reason) == ("m-alice", "mark-lost", "the node was reinstalled")
    assert row.evidence["unknown_answers"] >= 1 and row.evidence["attempt_number"] == 1
    with pytest.raises(DBAPIError, match="append-only"):
        async with stack.engine.begin() as conn:
            await conn.execute(text("UPDATE run_decisions SET actor = 'm-bob'"))
    # The dry run is audited as a dry run, the decision as accepted.
    async with stack.engine.connect() as conn:
        audited = (await conn.execute(text(
            "SELECT decision, summary->>'dry_run' AS dry FROM audit_records"
            " WHERE action = 'run.reconcile' ORDER BY seq"))).all()
    assert [(a.decision, a.dry) for a in audited] == [("dry-run", "true"), ("accepted", None)]
    # After the end: a dry run says so; a real one is refused.
    after = await stack.client.request(reconcile(True), timeout=15)
    assert not after.eligible and "already ended" in after.explanation
    with pytest.raises(Rejected) as refused:
        await stack.client.request(reconcile(False), timeout=15)
    assert refused.value.code == "not-reconcilable"
    # Each dry run's record says what it concluded: allowed (and what it would do) or the
    # refusal the real decision would get — so the two dry runs do not look alike.
    async with stack.engine.connect() as conn:
        audited = (await conn.execute(text(
            "SELECT decision, code, summary->'conclusion' AS conclusion FROM audit_records"
            " WHERE action = 'run.reconcile' ORDER BY seq"))).all()
    assert [(a.decision, a.code) for a in audited] == [
        ("dry-run", "allowed"), ("accepted", ""), ("dry-run", "not-reconcilable"),
        ("refused", "not-reconcilable")]
    allowed, not_allowed = audited[0].conclusion, audited[2].conclusion
    assert allowed["allowed"] is True and allowed["would"] == "mark Attempt 1 lost; the Run ends lost"
    assert "does not know Attempt 1" in allowed["explanation"]
    assert not_allowed["allowed"] is False and "already ended" in not_allowed["explanation"]
    assert audited[1].conclusion is None and audited[3].conclusion is None


async def test_mark_lost_of_a_run_the_site_still_observes_is_refused(make_stack):
    def running_forever(cmd, double):
        if cmd.kind == "observe":
            return result(cmd, phase="running", native_state="RUNNING")
        return happy_batch(cmd, double)

    # An observe cycle of 5 s: an observe in flight is not yet a silence of the Site.
    settings = dataclasses.replace(LOST_FAST, observe_interval_seconds=5)
    stack = await make_stack(settings=settings, script=running_forever)
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: r.phase == "running")
    with pytest.raises(Rejected) as refused:
        await stack.client.request(
            pb.ReconcileRun(metadata=cmd_meta(), run_id=run_id, decision="mark-lost"), timeout=15
        )
    assert refused.value.code == "not-reconcilable" and "cancel" in refused.value.message
    assert (await stack.get(run_id)).phase == "running"


async def test_a_deferred_observe_becomes_the_waiting_reason_and_uncertain_at_once(make_stack):
    """SiteProgressReported → waiting_reason; the result clears it. Confidence turns
    uncertain on the deferral, long before stale_after (30 s here)."""

    def hold_second_observe(cmd, double):
        if cmd.kind == "observe" and double.count(cmd.attempt_id, "observe") >= 2:
            return None  # the Runtime defers it
        if cmd.kind == "observe":
            return result(cmd, phase="queued", native_state="PENDING",
                          native_wait="slurm-resources", native_stage="compute")
        return happy_batch(cmd, double)

    stack = await make_stack(settings=dataclasses.replace(FAST, observe_interval_seconds=5),
                             script=hold_second_observe)
    run_id = await stack.launch()
    queued = await stack.wait_for(run_id, lambda r: r.native_wait == "slurm-resources")
    assert (queued.native_stage, queued.observation_confidence) == ("compute", "current")
    await stack.wait_for(run_id, lambda r: len(stack.site.held) == 1, timeout=20)
    (held,) = stack.site.held.values()
    message_id = await stack.site.report_progress(held, "slurm-observation-unavailable")
    await stack.consumed([message_id])
    run = await stack.wait_for(run_id, lambda r: r.observation_confidence == "uncertain", timeout=3)
    assert run.waiting_reason == "slurm-observation-unavailable"
    listed = await stack.client.request(
        pb.ListRuns(metadata=query_meta()), timeout=15
    )
    assert [r.waiting_reason for r in listed.runs if r.run_id == run_id] == [
        "slurm-observation-unavailable"
    ]
    await stack.site.resolve(held.metadata.command_id,
                             result(held, phase="succeeded", native_state="COMPLETED", exit_code=0))
    run = await stack.terminal(run_id)
    assert run.outcome == "succeeded" and run.waiting_reason == "" and run.native_wait == ""


async def test_an_unanswered_observe_turns_stale_within_one_observe_cycle(make_stack):
    def hold_second_observe(cmd, double):
        if cmd.kind == "observe" and double.count(cmd.attempt_id, "observe") >= 2:
            return None
        if cmd.kind == "observe":
            return result(cmd, phase="running", native_state="RUNNING")
        return happy_batch(cmd, double)

    # stale_after 30 s; one observe cycle 1 s (its wake-up, not the 30 s recheck).
    settings = dataclasses.replace(FAST, observe_interval_seconds=1, result_recheck_seconds=30)
    stack = await make_stack(settings=settings, script=hold_second_observe)
    run_id = await stack.launch()
    await stack.wait_for(run_id, lambda r: len(stack.site.held) == 1, timeout=20)
    current = await stack.get(run_id)
    assert current.observation_confidence == "current"
    run = await stack.wait_for(run_id, lambda r: r.observation_confidence == "stale", timeout=4)
    assert run.phase == "running"
