"""The pure rules of Pipelines and steps (seed 004 §8A–§8C, §8E)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipeline_coordination.domain import answers, identities, schedule
from pipeline_coordination.domain import pipeline as d

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40
PID = "0b3f1c9a-1111-4222-8333-944455556666"


def prepared(action: str, revision: int = 1, commit: str = C1, family: str = d.BATCH) -> d.PreparedAction:
    return d.PreparedAction(
        action=action,
        workload_id=f"w-{action}",
        revision=revision,
        commit=commit,
        family=family,
        environment="k8s" if family == d.SERVICE else "slurm",
        service_kind="application" if family == d.SERVICE else "",
    )


def new_pipeline(requested: tuple[str, ...] = ()) -> d.Pipeline:
    return d.Pipeline(PID, "demo", "m-alice", "/repos/demo.git", "main", requested_actions=requested)


def running(*actions: tuple[str, str]) -> d.Pipeline:
    p = answers.on_branch_prepared(new_pipeline(), [prepared(a, family=f) for a, f in actions], C1, NOW)
    return schedule.settle(p, NOW).pipeline


def launch(p: d.Pipeline, index: int, commit: str, run_id: str) -> d.Pipeline:
    s = p.step(index)
    p = answers.on_pinned(p, index, prepared(s.action, 2, commit, s.family), NOW)
    p = answers.launch_intent(p, index)
    return answers.on_launched(p, index, run_id, NOW)


TIMING = d.Timing()


def test_validate_start_lists_every_problem():
    with pytest.raises(d.InvalidStart) as e:
        d.validate_start("", "bad..branch", ["train", "train", "Not Valid"])
    assert len(e.value.problems) == 4
    d.validate_start("https://git.example.org/lab/demo.git", "feature/x", ["train", "eval"])


def test_run_all_in_order_keeps_actions_yaml_order_and_explicit_list_its_own():
    actions = [prepared("prep"), prepared("train"), prepared("eval")]
    assert [s.action for s in d.steps_from_prepared(actions, ())] == ["prep", "train", "eval"]
    assert [s.action for s in d.steps_from_prepared(actions, ("eval", "prep"))] == ["eval", "prep"]
    with pytest.raises(d.StepSelectionError, match=r"missing \(actions: eval, prep, train\)"):
        d.steps_from_prepared(actions, ("missing",))


def test_prepare_then_pin_launch_and_hand_off():
    p = running(("train", d.BATCH), ("eval", d.BATCH))
    assert p.state == d.RUNNING
    assert schedule.plan(p, NOW, TIMING).effect == d.Effect("pin", 1)
    p = launch(p, 1, C1, "run-1")
    assert p.step(1).state == d.LAUNCHED and p.step(1).pinned_commit == C1
    assert schedule.plan(p, NOW, TIMING).effect is None  # waits for RunCompleted
    p = answers.on_run_completed(p, 1, "run-1", "succeeded", "", C2)
    p = schedule.settle(p, NOW).pipeline
    assert p.step(1).state == d.STEP_SUCCEEDED and p.step(1).output_commit == C2
    assert schedule.plan(p, NOW, TIMING).effect == d.Effect("pin", 2)
    # Step 2 is pinned to what the branch names when it starts: step 1's push.
    p = launch(p, 2, C2, "run-2")
    assert p.step(2).pinned_commit == C2 and p.step(2).revision == 2
    p = answers.on_run_completed(p, 2, "run-2", "succeeded", "", C3)
    s = schedule.settle(p, NOW)
    assert s.completed and s.pipeline.state == d.SUCCEEDED
    assert not schedule.settle(s.pipeline, NOW).completed  # idempotent


def test_failed_step_fails_pipeline_and_skips_the_rest():
    p = launch(running(("train", d.BATCH), ("eval", d.BATCH)), 1, C1, "run-1")
    p = answers.on_run_completed(p, 1, "run-1", "failed", "exit-nonzero", "")
    s = schedule.settle(p, NOW)
    assert s.completed
    assert s.pipeline.state == d.FAILED and s.pipeline.failed_step == 1
    assert s.pipeline.reason_code == "exit-nonzero"
    assert s.pipeline.step(2).state == d.SKIPPED


@pytest.mark.parametrize(("outcome", "code"), [("lost", "lost-at-site"), ("timed-out", "wall-time-exceeded")])
def test_a_lost_or_timed_out_run_fails_its_step(outcome, code):
    p = launch(running(("train", d.BATCH), ("eval", d.BATCH)), 1, C1, "run-1")
    s = schedule.settle(answers.on_run_completed(p, 1, "run-1", outcome, code, ""), NOW)
    assert s.completed and s.pipeline.state == d.FAILED and s.pipeline.reason_code == code
    assert s.pipeline.step(1).state == d.STEP_FAILED and s.pipeline.step(2).state == d.SKIPPED


def test_duplicate_and_foreign_completions_are_absorbed():
    p = launch(running(("train", d.BATCH)), 1, C1, "run-1")
    p1 = answers.on_run_completed(p, 1, "run-1", "succeeded", "", C2)
    assert answers.on_run_completed(p1, 1, "run-1", "failed", "x", "") == p1  # first end wins
    assert answers.on_run_completed(p, 1, "run-other", "succeeded", "", C2) == p  # not this step's Run
    assert answers.on_run_completed(p, 1, "run-1", "exploded", "", "") == p  # not an outcome


def test_completion_before_launch_reply_is_recorded():
    p = running(("train", d.BATCH))
    p = answers.on_pinned(p, 1, prepared("train"), NOW)
    p = answers.launch_intent(p, 1)
    # RunCompleted overtakes the LaunchRun reply.
    p = answers.on_run_completed(p, 1, "run-1", "succeeded", "", C2)
    assert p.step(1).run_id == "run-1"
    p = answers.on_launched(p, 1, "run-1", NOW)
    assert schedule.settle(p, NOW).pipeline.state == d.SUCCEEDED
    # A completion for a step that never recorded its launch intent is ignored.
    q = answers.on_pinned(running(("train", d.BATCH)), 1, prepared("train"), NOW)
    assert answers.on_run_completed(q, 1, "run-1", "succeeded", "", C2) == q


def test_stop_fences_unlaunched_steps_and_cancels_active_runs():
    p = launch(running(("train", d.BATCH), ("eval", d.BATCH)), 1, C1, "run-1")
    p, recorded = answers.request_stop(p, "m-alice", "enough")
    assert recorded and not answers.request_stop(p, "m-alice", "again")[1]
    p = schedule.settle(p, NOW).pipeline
    assert p.state == d.STOPPING and p.step(2).state == d.SKIPPED
    assert schedule.plan(p, NOW, TIMING).effect == d.Effect("cancel", 1)
    p = answers.on_cancel_recorded(p, 1)
    assert p.step(1).state == d.CANCELLING
    assert schedule.settle(p, NOW).pipeline.state == d.STOPPING  # waits for the Run's end
    p = answers.on_run_completed(p, 1, "run-1", "cancelled", "cancelled-by-member", "")
    s = schedule.settle(p, NOW)
    assert s.completed and s.pipeline.state == d.STOPPED and s.pipeline.step(1).state == d.CANCELLED


def test_launch_intent_is_refused_after_a_stop():
    p = answers.on_pinned(running(("train", d.BATCH)), 1, prepared("train"), NOW)
    stopped, _ = answers.request_stop(p, "m-alice", "")
    assert answers.launch_intent(stopped, 1) == stopped
    assert schedule.settle(stopped, NOW).pipeline.state == d.STOPPED


def test_stop_while_launch_in_flight_resends_the_launch_then_cancels():
    p = answers.launch_intent(answers.on_pinned(running(("train", d.BATCH)), 1, prepared("train"), NOW), 1)
    p = schedule.settle(answers.request_stop(p, "m-alice", "")[0], NOW).pipeline
    assert p.state == d.STOPPING
    assert schedule.plan(p, NOW, TIMING).effect == d.Effect("launch", 1)
    p = answers.on_launched(p, 1, "run-1", NOW)
    assert schedule.plan(p, NOW, TIMING).effect == d.Effect("cancel", 1)


def test_service_step_advances_when_ready_and_times_out_otherwise():
    p = launch(running(("serve", d.SERVICE), ("probe", d.BATCH)), 1, C1, "run-s")
    later = NOW + timedelta(seconds=TIMING.service_poll)
    assert schedule.plan(p, later, TIMING).effect == d.Effect("observe", 1)
    not_ready = answers.on_observed(p, 1, d.RunView("run-s"), later)
    assert not_ready.step(1).state == d.LAUNCHED
    ready = schedule.settle(answers.on_observed(p, 1, d.RunView("run-s", ready=True, endpoint="http://svc"), later), later).pipeline
    assert ready.step(1).state == d.READY and ready.step(1).endpoint == "http://svc"
    assert schedule.plan(ready, later, TIMING).effect == d.Effect("pin", 2)
    # Not healthy within the timeout: the step fails and its Run is cancelled.
    late = NOW + timedelta(seconds=TIMING.service_ready_timeout + 1)
    assert schedule.plan(p, late, TIMING).effect == d.Effect("service-timeout", 1)
    failed = schedule.settle(answers.on_service_timeout(p, 1, TIMING, late), late).pipeline
    assert failed.state == d.FAILED and failed.reason_code == d.R_SERVICE_NOT_READY
    assert schedule.plan(failed, late, TIMING).effect == d.Effect("cancel", 1)


def test_stop_after_success_cancels_ready_services():
    p = launch(running(("serve", d.SERVICE)), 1, C1, "run-s")
    p = schedule.settle(answers.on_observed(p, 1, d.RunView("run-s", ready=True, endpoint="http://svc"), NOW), NOW).pipeline
    assert p.state == d.SUCCEEDED and not p.needs_work
    p, recorded = answers.request_stop(p, "m-alice", "done")
    assert recorded and p.needs_work
    assert schedule.plan(p, NOW, TIMING).effect == d.Effect("cancel", 1)


def test_refusals_end_the_pipeline_with_the_owner_code():
    p = answers.on_branch_refused(new_pipeline(), "actions-invalid", "actions.yaml:3:1: bad", NOW)
    assert p.state == d.FAILED and p.reason_code == "actions-invalid"
    q = answers.on_step_refused(running(("train", d.BATCH)), 1, "branch-not-found", "gone", NOW)
    s = schedule.settle(q, NOW).pipeline
    assert s.state == d.FAILED and s.failed_step == 1 and s.reason_code == "branch-not-found"
    missing = answers.on_branch_prepared(new_pipeline(("nope",)), [prepared("train")], C1, NOW)
    assert missing.state == d.FAILED and missing.reason_code == d.R_ACTION_NOT_IN_BRANCH


def test_temporary_failures_back_off():
    p = new_pipeline()
    p = answers.on_temporary_failure(answers.on_temporary_failure(p, "timeout"), "timeout")
    assert schedule.retry_delay(p, TIMING) == 2 * TIMING.retry_base
    assert answers.on_branch_prepared(p, [prepared("a")], C1, NOW).retries == 0


def test_identities_are_stable_and_parse_back():
    a = identities.command_id(PID, "launch", 2, 1)
    assert a == identities.command_id(PID, "launch", 2, 1)
    assert a != identities.command_id(PID, "launch", 2, 2) != identities.command_id(PID, "pin", 2, 1)
    key = identities.launch_key(PID, 2)
    assert identities.parse_launch_key(key) == (PID, 2, 1)
    assert d.step_of_run({}, key) == d.StepIdentity(PID, 2, 1)
    assert d.step_of_run({"pipeline_id": PID, "pipeline_step": "3"}, "") == d.StepIdentity(PID, 3)
    assert d.step_of_run({}, "somebody-else") is None
