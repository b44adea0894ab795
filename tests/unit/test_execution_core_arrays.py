"""Array groups' pure rules (ADR 0032): when a group forms, dispatches or falls back, its one
deadline, the after_command_id of each child, each task's start, and the lifecycle of a child."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from execution_core.domain import arrays as a
from execution_core.domain import lifecycle as lc
from execution_core.domain import reasons
from execution_core.domain import states as s
from tests.unit.execution_core_lifecycle_sim import T0, TIMING, Sim

DEADLINE = T0 + timedelta(seconds=300)


def group(**kw) -> a.GroupFacts:
    return a.GroupFacts(**{"state": a.FORMING, "mode": a.REQUIRE, "size": 10, "prepared": 0,
                           "dropped": 0, "deadline": DEADLINE, **kw})


def test_a_group_dispatches_once_every_child_is_prepared_and_waits_until_its_deadline():
    assert a.settle(group(prepared=10), T0).action == "dispatch"
    waiting = a.settle(group(prepared=9), T0)
    assert (waiting.action, waiting.wake_at) == ("wait", DEADLINE)
    for state in a.SETTLED:
        assert a.settle(group(state=state, prepared=10), T0).action == "none"


def test_the_shared_deadline_falls_back_by_mode_and_says_how_many_were_prepared():
    late = DEADLINE + timedelta(seconds=1)
    prefer = a.settle(group(mode=a.PREFER, prepared=7), late)
    require = a.settle(group(prepared=7), late)
    assert (prefer.action, require.action) == (a.INDIVIDUAL, a.FAILED)
    assert prefer.reason == require.reason == (
        "only 7 of 10 children were prepared before the array group's deadline")
    assert a.settle(group(prepared=7), DEADLINE).action == a.FAILED  # at the deadline, not after


def test_a_dropped_child_settles_the_group_at_once():
    verdict = a.settle(group(mode=a.PREFER, prepared=9, dropped=1), T0)
    assert verdict.action == a.INDIVIDUAL and verdict.reason.startswith("1 of 10 children ended")
    assert a.settle(group(prepared=0, dropped=2), T0).action == a.FAILED


def test_refusals_and_other_sites_fall_back_with_the_code_as_the_reason():
    assert a.after_refusal(a.PREFER, "array-not-homogeneous", "compute.cpus differs") == (
        a.INDIVIDUAL, "start-array refused: array-not-homogeneous: compute.cpus differs")
    assert a.after_refusal(a.REQUIRE, "slurm-error-2014", "") == (a.FAILED, "start-array refused: slurm-error-2014")
    assert a.not_an_array(a.REQUIRE, "Site k is a k8s Site")[0] == a.FAILED


def test_a_group_larger_than_the_concurrent_run_limit_settles_at_once_in_both_modes():
    assert a.held_at_limit(a.REQUIRE, 12, 10) == (
        a.FAILED, "the concurrent-Run limit of 10 admits fewer than its 12 children at once")
    assert a.held_at_limit(a.PREFER, 12, 10)[0] == a.INDIVIDUAL


def test_a_group_within_the_limit_waits_under_require_and_falls_back_under_prefer():
    assert a.held_at_limit(a.REQUIRE, 10, 10) is None
    assert a.held_at_limit(a.REQUIRE, 3, None) is None
    assert a.held_at_limit(a.PREFER, 10, 10) == (
        a.INDIVIDUAL, "the concurrent-Run limit of 10 was reached while its 10 children formed")


def test_a_group_request_is_checked():
    gid = "2c4e6a8b-3333-5444-9555-a66677778888"
    ok = a.GroupRequest(gid, 10, 9, 3, "prefer")
    assert a.check_request(ok) == ""
    assert "lowercase UUID" in a.check_request(replace(ok, group_id=gid.upper()))
    assert "1..1000" in a.check_request(replace(ok, size=1001))
    assert "index must be 0..9" in a.check_request(replace(ok, index=10))
    assert "max_active must be 1..10" in a.check_request(replace(ok, max_active=11))
    assert "prefer or require" in a.check_request(replace(ok, mode="never"))
    assert a.start_array_command_id(gid) == a.start_array_command_id(gid) != a.start_array_command_id(
        gid.replace("8888", "8889"))


def test_after_command_id_is_start_array_for_index_0_and_the_own_prepare_for_the_others():
    prepare = {"command_id": "p", "kind": "prepare", "seq": 1}
    array = {"command_id": "sa", "kind": "start-array", "seq": 5}
    relayed = {"command_id": "st", "kind": "start", "seq": 9, "relayed_by": "sa"}
    log = {"command_id": "log", "kind": "read-log", "seq": 11}
    assert a.predecessor([prepare, array, relayed, log]) == "sa"  # index 0 carries start-array
    assert a.predecessor([prepare, relayed, log]) == "p"  # any other child
    assert a.predecessor([]) == ""


def test_each_task_takes_its_own_native_jobs_from_array_tasks():
    result = {"outcome": "succeeded", "observation": {"phase": "queued", "native_state": "PENDING", "array_tasks": [
        {"index": 0, "attempt_id": "a0", "native_jobs": [{"stage": "compute", "job_id": "102_0"}]},
        {"index": 1, "attempt_id": "a1", "native_jobs": [{"stage": "stage-in", "job_id": "101_1"},
                                                         {"stage": "compute", "job_id": "102_1"}]},
        {"index": 2, "attempt_id": "a2", "native_jobs": []},
        "not a task"]}}
    tasks = a.task_results(result)
    assert sorted(tasks) == ["a0", "a1"]  # a task without jobs is left to its own start
    assert tasks["a1"]["native_jobs"] == [{"stage": "stage-in", "job_id": "101_1"},
                                          {"stage": "compute", "job_id": "102_1"}]
    assert tasks["a1"]["observation"]["phase"] == "queued" and tasks["a1"]["outcome"] == "succeeded"


def facts(state: str, **kw) -> a.ArrayFacts:
    return a.ArrayFacts(group_id="g", index=kw.pop("index", 1), state=state, mode=a.REQUIRE,
                        deadline=DEADLINE, **kw)


def prepared(sim_facts: a.ArrayFacts) -> Sim:
    sim = Sim()
    sim.step()
    sim.result("prepare")
    sim.attempt = replace(sim.attempt, array=sim_facts)
    return sim


def test_a_prepared_child_of_a_forming_group_holds_its_start_until_the_group_deadline():
    sim = prepared(facts(a.FORMING))
    d = sim.step()
    assert d.commands == [] and d.waiting_reason == reasons.WAIT_ARRAY_GROUP_FORMING
    assert d.phase == s.PHASE_PREPARING and d.wake_at == T0 + timedelta(seconds=TIMING.result_recheck)
    sim.wait(299)
    assert sim.step().wake_at == DEADLINE


def test_a_dispatched_group_is_the_childs_uncertain_start_stopped_at_its_dispatch_deadline():
    sim = prepared(facts(a.DISPATCHED, command_id="sa", command_seq=7, command_at=T0))
    d = sim.step()
    assert d.commands == [] and d.phase == s.PHASE_STARTING
    sim.wait(TIMING.dispatch_timeout + 1)
    d = sim.step()
    assert [k for k, _ in d.commands] == ["cancel"] and d.cancel_origin == "deadline"


def test_a_failed_group_ends_its_child_array_unavailable_and_cleans_up_its_prepare():
    sim = prepared(facts(a.FAILED, reason="start-array refused: array-not-homogeneous"))
    d = sim.step()
    assert d.end == (s.OUTCOME_FAILED, reasons.ARRAY_UNAVAILABLE)
    assert [k for k, _ in d.commands] == ["cancel"]
    assert a.start_note(facts(a.FAILED, reason="x")) == "refused: x"


def test_an_individual_child_starts_only_with_a_free_slot_and_frees_it_at_its_end():
    waiting = prepared(facts(a.INDIVIDUAL, reason="r"))
    d = waiting.step()
    assert d.commands == [] and d.waiting_reason == reasons.WAIT_ARRAY_MAX_ACTIVE
    assert a.slot_change(waiting.attempt.array, False, False) == ""
    free = prepared(facts(a.INDIVIDUAL, reason="r", slot_free=True))
    d = free.step()
    assert [k for k, _ in d.commands] == ["start"]
    assert a.slot_change(free.attempt.array, True, False) == "take"
    assert a.slot_change(facts(a.INDIVIDUAL, slot="held"), False, True) == "free"
    assert a.slot_change(facts(a.STARTED), True, True) == ""
    assert a.start_note(facts(a.INDIVIDUAL, reason="r")) == "individual: r"


def test_a_started_childs_relayed_start_is_an_ordinary_start():
    sim = prepared(facts(a.STARTED, command_id="sa", command_seq=2, command_at=T0))
    start = lc.CommandFact("st", "start", 1, 3, T0, outcome="succeeded",
                           native_jobs=({"stage": "compute", "job_id": "102_1"},),
                           observation={"phase": "queued"}, result_at=T0)
    sim.attempt = replace(sim.attempt, commands=sim.attempt.commands + (start,))
    d = sim.step()
    assert d.emit_started and d.phase == s.PHASE_QUEUED and d.commands == []
    assert d.attempt.native_jobs == [{"stage": "compute", "job_id": "102_1"}]
    assert a.start_note(sim.attempt.array) == "array g task 1"
