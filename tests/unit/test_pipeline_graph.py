"""The step graph of a Pipeline: needs, when, skips, max_active, the outcome, reruns (pure rules)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline_coordination.domain import answers, graph, rerun, schedule
from pipeline_coordination.domain import pipeline as d

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
C1, C2 = "1" * 40, "2" * 40
PID = "0b3f1c9a-1111-4222-8333-944455556666"
TIMING = d.Timing()


def prepared(action: str, needs: tuple[str, ...] = (), when: str = "success") -> d.PreparedAction:
    return d.PreparedAction(action, f"w-{action}", 1, C1, d.BATCH, "slurm", needs=needs, when=when)


def running(*actions: d.PreparedAction, requested: tuple[str, ...] = (), max_active: int = 4) -> d.Pipeline:
    p = d.Pipeline(PID, "demo", "m-alice", "/repos/demo.git", "main", requested_actions=requested,
                   max_active=max_active)
    return schedule.settle(answers.on_branch_prepared(p, list(actions), C1, NOW), NOW).pipeline


DIAMOND = (prepared("a"), prepared("b", ("a",)), prepared("c", ("a",)), prepared("d", ("b", "c")))


def effects(p: d.Pipeline) -> d.Effect | None:
    return schedule.plan(p, NOW, TIMING).effect


def start(p: d.Pipeline, index: int, run_id: str, commit: str = C1) -> d.Pipeline:
    """Pin, record intent and launch step ``index`` as the coordinator does."""
    assert effects(p) == d.Effect("pin", index)
    p = answers.on_pinned(p, index, d.PreparedAction(p.step(index).action, "w", 2, commit, d.BATCH, "slurm"), NOW)
    assert effects(p) == d.Effect("launch", index)
    p = answers.launch_intent(p, index)
    return schedule.settle(answers.on_launched(p, index, run_id, NOW), NOW).pipeline


def end(p: d.Pipeline, index: int, outcome: str, commit: str = "") -> d.Pipeline:
    p = answers.on_run_completed(p, index, p.step(index).run_id, outcome, "exit-nonzero" if outcome == "failed" else "", commit)
    return schedule.settle(p, NOW).pipeline


def test_a_file_without_needs_runs_in_order_also_for_an_explicit_list():
    steps = d.steps_from_prepared([prepared("x"), prepared("y"), prepared("z")], ())
    assert [s.needs for s in steps] == [(), (1,), (2,)]
    steps = d.steps_from_prepared([prepared("x"), prepared("y"), prepared("z")], ("z", "x"))
    assert [(s.action, s.needs) for s in steps] == [("z", ()), ("x", (1,))]


def test_needs_become_step_indices_and_a_list_must_hold_what_it_needs():
    steps = d.steps_from_prepared(list(DIAMOND), ())
    assert [s.needs for s in steps] == [(), (1,), (1,), (2, 3)]
    with pytest.raises(graph.GraphError) as e:
        d.steps_from_prepared(list(DIAMOND), ("d", "b"))
    assert e.value.code == "needs-not-selected" and "d needs c" in str(e.value)
    p = running(*DIAMOND, requested=("d", "b"))
    assert p.state == d.FAILED and p.reason_code == "needs-not-selected" and not p.steps


@pytest.mark.parametrize("needs", [[(2,), (1,)], [(1,)], [(), (5,)], [(2,), (3,), (1,)]])
def test_cycles_self_references_and_strangers_are_refused(needs):
    with pytest.raises(graph.GraphError):
        graph.check_dag(needs)


def test_bounds_on_nodes_and_edges():
    with pytest.raises(graph.GraphError, match="at most 200"):
        graph.check_dag([()] * 201)
    wide = [()] * 60 + [tuple(range(1, 61))] * 40  # 2,400 needs
    with pytest.raises(graph.GraphError, match="2000"):
        graph.check_dag(wide)


def test_diamond_runs_b_and_c_together_and_d_after_both():
    p = running(*DIAMOND)
    p = start(p, 1, "r1")
    assert effects(p) is None  # waits for a
    p = end(p, 1, "succeeded", C2)
    p = start(p, 2, "r2", C2)
    p = start(p, 3, "r3", C2)  # c starts while b runs
    assert {s.index for s in p.steps if s.state == d.LAUNCHED} == {2, 3}
    p = end(p, 3, "succeeded")
    assert effects(p) is None and p.step(4).state == d.WAITING  # d needs b too
    p = end(p, 2, "succeeded")
    p = start(p, 4, "r4")
    p = end(p, 4, "succeeded")
    assert p.state == d.SUCCEEDED and not schedule.partial(p)
    assert schedule.counts(p) == {"total": 4, "waiting": 0, "active": 0, "succeeded": 4, "failed": 0,
                                  "cancelled": 0, "skipped": 0}


def test_failing_branch_skips_its_dependents_lets_the_other_finish_and_reports_partial_failure():
    actions = (prepared("a"), prepared("b", ("a",)), prepared("c", ("a",)), prepared("d", ("b",)))
    p = end(start(running(*actions), 1, "r1"), 1, "succeeded")
    p = start(start(p, 2, "r2"), 3, "r3")
    p = end(p, 2, "failed")
    assert p.step(4).state == d.SKIPPED and p.step(4).reason_code == schedule.R_NEEDS_NOT_SUCCEEDED
    assert "2 (b, failed)" in p.step(4).message
    assert p.state == d.RUNNING  # c still runs: a failing branch does not stop the others
    p = end(p, 3, "succeeded")
    assert p.state == d.FAILED and p.failed_step == 2 and p.reason_code == "exit-nonzero"
    assert schedule.partial(p)
    assert schedule.counts(p)["succeeded"] == 2 and schedule.counts(p)["skipped"] == 1


def test_when_failure_runs_a_clean_up_and_a_chain_of_them_only_after_a_real_failure():
    actions = (prepared("train"), prepared("cleanup", ("train",), "failure"),
               prepared("notify", ("cleanup",), "failure"), prepared("report", ("train",), "always"))
    p = end(start(running(*actions), 1, "r1"), 1, "failed")
    p = start(start(p, 2, "r2"), 4, "r4")  # the clean-up and the always step run
    p = end(end(p, 2, "succeeded"), 4, "succeeded")
    # notify needs cleanup, which succeeded: its when: failure is not met.
    assert p.step(3).state == d.SKIPPED and p.step(3).reason_code == schedule.R_NEEDS_SUCCEEDED
    assert p.state == d.FAILED and p.failed_step == 1  # a clean-up never hides the failure

    ok = end(start(running(*actions), 1, "r1"), 1, "succeeded")
    assert ok.step(2).state == d.SKIPPED and ok.step(3).state == d.SKIPPED  # skipped clean-up counts as success
    ok = end(start(ok, 4, "r4"), 4, "succeeded")
    assert ok.state == d.SUCCEEDED


def test_max_active_holds_ready_steps_back():
    wide = [prepared("root")] + [prepared(f"s{i}", ("root",)) for i in range(5)]
    p = end(start(running(*wide, max_active=2), 1, "r1"), 1, "succeeded")
    p = start(start(p, 2, "r2"), 3, "r3")
    assert schedule.active_count(p) == 2 and effects(p) is None  # three more are ready, none may start
    p = end(p, 2, "succeeded")
    p = start(p, 4, "r4")
    assert effects(p) is None


def test_duplicate_and_out_of_order_completions():
    p = end(start(running(*DIAMOND), 1, "r1"), 1, "succeeded")
    p = start(start(p, 2, "r2"), 3, "r3")
    p = end(p, 3, "succeeded")
    again = end(p, 3, "failed")  # a second, different end of the same Run: the first end wins
    assert again == p
    assert end(p, 3, "succeeded") == p  # an exact repeat changes nothing
    stranger = answers.on_run_completed(p, 2, "someone-else", "failed", "", "")
    assert stranger == p
    # The end of step 4's Run cannot arrive before step 4 recorded a launch.
    assert answers.on_run_completed(p, 4, "r4", "succeeded", "", "") == p


def test_stop_skips_waiting_steps_with_the_reason():
    p = start(running(*DIAMOND), 1, "r1")
    p, recorded = answers.request_stop(p, "m-alice", "enough")
    p = schedule.settle(p, NOW).pipeline
    assert recorded and p.state == d.STOPPING
    assert {s.reason_code for s in p.steps if s.state == d.SKIPPED} == {d.R_STOPPED}


def test_rerun_failed_keeps_what_succeeded_and_reruns_failed_and_skipped():
    actions = (prepared("a"), prepared("b", ("a",)), prepared("c", ("a",)), prepared("d", ("b", "c")))
    p = end(start(running(*actions), 1, "r1"), 1, "succeeded", C2)
    p = end(end(start(start(p, 2, "r2"), 3, "r3"), 2, "failed"), 3, "succeeded")
    assert p.state == d.FAILED
    with pytest.raises(rerun.RerunRefused) as e:
        rerun.rerun(start(running(*DIAMOND), 1, "x"), pipeline_id="n", member="m-alice", failed_only=True)
    assert e.value.code == "pipeline-not-ended"

    new = rerun.rerun(p, pipeline_id="new-1", member="m-bob", failed_only=True)
    assert new.state == d.RUNNING and new.rerun_of == PID and new.initiating_member == "m-bob"
    assert rerun.rerun_steps(new) == [2, 4]
    assert new.step(1).carried_from == PID and new.step(1).run_id == "r1" and not new.step(1).awaiting_end
    assert new.step(2).state == d.WAITING and new.step(2).run_id == "" and new.step(2).needs == (1,)
    assert effects(schedule.settle(new, NOW).pipeline) == d.Effect("pin", 2)  # b at once; d after it
    full = rerun.rerun(p, pipeline_id="new-2", member="m-alice", failed_only=False)
    assert rerun.rerun_steps(full) == [1, 2, 3, 4]
    done = end(start(running(*DIAMOND), 1, "r"), 1, "succeeded")
    done = end(end(start(start(done, 2, "r2"), 3, "r3"), 2, "succeeded"), 3, "succeeded")
    done = end(start(done, 4, "r4"), 4, "succeeded")
    with pytest.raises(rerun.RerunRefused) as e:
        rerun.rerun(done, pipeline_id="n", member="m-alice", failed_only=True)
    assert e.value.code == "nothing-to-rerun"


def test_max_active_bounds():
    assert graph.bounded_max_active(0) == 4
    with pytest.raises(d.InvalidStart, match="max_active"):
        d.validate_start("/r.git", "main", [], 51)
