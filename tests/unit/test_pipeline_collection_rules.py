"""Collections as Pipeline steps: children, maxActive, failFast, cancel, stop, counts (pure rules)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from metallo import parameters
from pipeline_coordination.domain import answers, collection, collection_answers, schedule
from pipeline_coordination.domain import pipeline as d
from pipeline_coordination.domain.collection_schedule import just_ended

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
C1 = "1" * 40
PID = "0b3f1c9a-1111-4222-8333-944455556666"
TIMING = d.Timing()


def sweep(n: int = 20, max_active: int = 3, fail_fast: bool = False, array: str = "") -> collection.Shape:
    return collection.shape([("seed", [str(i) for i in range(n)])], [], max_active, fail_fast, array)


def running(shape: collection.Shape, *after: str) -> d.Pipeline:
    actions = [d.PreparedAction("sweep", "w-sweep", 1, C1, d.BATCH, "slurm", collection=shape)]
    actions += [d.PreparedAction(a, f"w-{a}", 1, C1, d.BATCH, "slurm", needs=("sweep",)) for a in after]
    p = d.Pipeline(PID, "demo", "m-alice", "/repos/demo.git", "main")
    return settle(answers.on_branch_prepared(p, actions, C1, NOW))


def settle(p: d.Pipeline) -> d.Pipeline:
    return schedule.settle(p, NOW).pipeline


def effect(p: d.Pipeline) -> d.Effect | None:
    return schedule.plan(p, NOW, TIMING).effect


def pinned(p: d.Pipeline, environment: str = "slurm") -> d.Pipeline:
    assert effect(p) == d.Effect("pin", 1)
    return settle(answers.on_pinned(p, 1, d.PreparedAction("sweep", "w-sweep", 2, C1, d.BATCH, environment), NOW))


def launch_next(p: d.Pipeline) -> tuple[d.Pipeline, int]:
    """Make the launch the plan asks for (intent first, then the reply); the child's index."""
    e = effect(p)
    assert e is not None and e.kind == "launch-item", e
    p = collection_answers.launch_item_intent(p, 1, e.item)
    p = collection_answers.on_item_launched(p, 1, e.item, f"run-{e.item}", NOW, f"cid-{e.item}")
    return settle(p), e.item


def end(p: d.Pipeline, k: int, outcome: str = "succeeded") -> d.Pipeline:
    return settle(collection_answers.on_item_completed(p, 1, k, f"run-{k}", outcome, "", ""))


def counts(p: d.Pipeline) -> dict[str, int]:
    return collection.counts(p.step(1).items)


def test_a_matrix_is_the_cross_product_last_name_fastest_and_bounded():
    items = parameters.expand([("lr", ["0.1", "0.01"]), ("seed", ["1", "2", "3"])])
    assert items[:3] == ({"lr": "0.1", "seed": "1"}, {"lr": "0.1", "seed": "2"}, {"lr": "0.1", "seed": "3"})
    assert len(items) == 6
    with pytest.raises(parameters.ParameterError, match="1024 items; at most 1000"):
        parameters.expand([("a", [str(i) for i in range(32)]), ("b", [str(i) for i in range(32)])])
    with pytest.raises(parameters.ParameterError, match="same variable METALLO_PARAM_LR"):
        parameters.expand([("lr", ["1"]), ("LR", ["2"])])
    with pytest.raises(parameters.ParameterError, match="must match"):
        parameters.check({"bad-name": "1"})
    assert parameters.environment({"lr": "0.1"}) == {"METALLO_PARAM_LR": "0.1"}


def test_records_name_the_same_parameters():
    with pytest.raises(parameters.ParameterError, match=r"parameters\[1\] names"):
        parameters.expand((), [{"a": "1"}, {"b": "2"}])
    assert parameters.expand((), [{"a": "1"}, {"a": "2"}]) == ({"a": "1"}, {"a": "2"})


def test_twenty_children_run_at_most_three_at_once_and_the_step_then_succeeds():
    p = pinned(running(sweep(20, 3, array="never"), "report"))
    s = p.step(1)
    assert s.state == d.LAUNCHED and len(s.items) == 20 and s.collection_id
    assert s.items[4].parameters == {"seed": "4"}
    assert s.array_decision == "individual: array: never"
    launched: list[int] = []
    most = 0
    while len(launched) < 20:
        while (e := effect(p)) is not None and e.kind == "launch-item":
            p, k = launch_next(p)
            launched.append(k)
        active = counts(p)["active"]
        most = max(most, active)
        assert active <= 3
        first_active = next(i.index for i in p.step(1).items if i.state == collection.LAUNCHED)
        p = end(p, first_active)
    while counts(p)["active"]:
        p = end(p, next(i.index for i in p.step(1).items if i.state == collection.LAUNCHED))
    assert most == 3 and sorted(launched) == list(range(1, 21))
    assert p.step(1).state == d.STEP_SUCCEEDED and counts(p)["succeeded"] == 20
    assert effect(p) == d.Effect("pin", 2)  # the step after the collection starts once it succeeded


def test_fail_fast_cancels_eligible_siblings_but_keeps_a_result_that_raced_to_completion():
    p = pinned(running(sweep(6, 3, fail_fast=True)))
    for _ in range(3):
        p, _k = launch_next(p)
    p = end(p, 1, "failed")
    c = counts(p)
    assert c["failed"] == 1 and c["cancelled"] == 3 and c["active"] == 2  # 4..6 never launched
    assert {i.reason_code for i in p.step(1).items[3:]} == {collection.R_FAIL_FAST}
    assert effect(p) == d.Effect("cancel-item", 1, 2)
    # Child 2's Run had already succeeded when its CancelRun arrived: its outcome stays.
    p = settle(collection_answers.on_item_cancel_recorded(p, 1, 2, ended="succeeded"))
    assert effect(p) == d.Effect("cancel-item", 1, 3)
    p = settle(collection_answers.on_item_cancel_recorded(p, 1, 3))
    assert p.step(1).items[2].state == collection.CANCELLING
    p = end(p, 3, "cancelled")
    c = counts(p)
    assert (c["succeeded"], c["failed"], c["cancelled"]) == (1, 1, 4)
    assert p.step(1).state == d.STEP_FAILED and p.step(1).reason_code == collection.R_COLLECTION_FAILED
    assert p.state == d.FAILED and "1 of 6 children succeeded" in p.message


def test_without_fail_fast_a_failed_child_lets_the_others_run():
    p = pinned(running(sweep(4, 2)))
    p, _ = launch_next(p)
    p, _ = launch_next(p)
    p = end(p, 1, "failed")
    assert effect(p) == d.Effect("launch-item", 1, 3)


def test_cancelling_the_collection_cancels_launched_children_and_never_launches_the_rest():
    p = pinned(running(sweep(5, 2), "report"))
    p, _ = launch_next(p)
    p, _ = launch_next(p)
    p, recorded = collection_answers.request_cancel(p, 1, "m-bob", "wrong data")
    assert recorded and not collection_answers.request_cancel(p, 1, "m-bob", "again")[1]
    p = settle(p)
    assert counts(p)["cancelled"] == 3
    # A launch already chosen is fenced by the cancel.
    assert collection_answers.launch_item_intent(p, 1, 3) == p
    for k in (1, 2):
        assert effect(p) == d.Effect("cancel-item", 1, k)
        p = settle(collection_answers.on_item_cancel_recorded(p, 1, k))
        p = end(p, k, "cancelled")
    s = p.step(1)
    assert s.state == d.CANCELLED and not s.cancel_requested  # a member's cancel fails the Pipeline
    assert p.step(2).state == d.SKIPPED and p.state == d.FAILED


def test_stopping_the_pipeline_stops_the_collection_without_failing_it():
    p = pinned(running(sweep(3, 1)))
    p, _ = launch_next(p)
    p, _ = answers.request_stop(p, "m-alice", "enough")
    p = settle(p)
    assert effect(p) == d.Effect("cancel-item", 1, 1)
    p = end(settle(collection_answers.on_item_cancel_recorded(p, 1, 1)), 1, "cancelled")
    assert p.state == d.STOPPED and p.step(1).state == d.CANCELLED and p.step(1).cancel_requested
    assert p.step(1).reason_code == collection.R_STOPPED  # a stop, not a cancel of the collection


def test_a_lost_child_is_uncertain_and_fails_the_collection():
    p = pinned(running(sweep(1, 1)))
    p, _ = launch_next(p)
    p = end(p, 1, "lost")
    assert counts(p)["uncertain"] == 1 and p.step(1).state == d.STEP_FAILED


def test_duplicate_and_stranger_completions_change_nothing():
    p = pinned(running(sweep(2, 2)))
    p, _ = launch_next(p)
    p = end(p, 1, "succeeded")
    assert end(p, 1, "failed") == p
    assert settle(collection_answers.on_item_completed(p, 1, 1, "run-other", "failed", "", "")) == p
    assert settle(collection_answers.on_item_completed(p, 1, 2, "run-2", "failed", "", "")) == p  # never launched


def test_array_require_off_slurm_is_refused_and_a_bad_shape_fails_the_step_when_it_starts():
    p = pinned(running(sweep(2, 2, array="require")), environment="k8s")
    assert p.step(1).state == d.STEP_FAILED and p.step(1).reason_code == collection.R_ARRAY_UNAVAILABLE
    assert "environment is k8s, not slurm" in p.step(1).array_decision
    bad = collection.shape([("x", ["1"]), ("X", ["2"])], [])
    p = pinned(running(bad))
    assert p.step(1).reason_code == collection.R_COLLECTION_INVALID and "METALLO_PARAM_X" in p.step(1).message
    assert not p.step(1).items


def test_the_collection_completed_moment_is_seen_once():
    p = pinned(running(sweep(1, 1)))
    p, _ = launch_next(p)
    ended = end(p, 1)
    assert [s.index for s in just_ended(p, ended)] == [1]
    assert just_ended(ended, settle(ended)) == []


def test_a_rerun_gives_the_collection_a_new_id_and_fresh_children():
    from pipeline_coordination.domain import rerun

    p = pinned(running(sweep(1, 1)))
    p, _ = launch_next(p)
    p = end(p, 1, "failed")
    new = rerun.rerun(p, pipeline_id="1b3f1c9a-1111-4222-8333-944455556666", member="m-alice", failed_only=True)
    s = new.step(1)
    assert s.collection == p.step(1).collection and s.collection_id != p.step(1).collection_id
    assert s.items == (collection.Item(1, {"seed": "0"}),) and s.state == d.WAITING
    assert replace(s, collection_id="") != s
    full = rerun.rerun(p, pipeline_id="2b3f1c9a-1111-4222-8333-944455556666", member="m-alice", failed_only=False)
    assert full.step(1).items == ()  # created afresh when the step starts


@pytest.mark.parametrize("array", ["prefer", "require"])
def test_a_slurm_array_collection_launches_every_child_at_once_in_one_group(array):
    from pipeline_coordination.application.collection_calls import child_array_group

    p = pinned(running(sweep(10, 3, array=array)))
    s = p.step(1)
    assert s.state == d.LAUNCHED and s.array_decision == f"array: {array}: one Slurm array per stage (maxActive 3)"
    launched = []
    while (e := effect(p)) is not None and e.kind == "launch-item":
        p, k = launch_next(p)
        launched.append(k)
    assert launched == list(range(1, 11)) and counts(p)["active"] == 10  # %maxActive throttles, not launches
    groups = {child_array_group(p.step(1), i) for i in p.step(1).items}
    assert {(g.size, g.max_active, g.mode) for g in groups} == {(10, 3, array)}
    assert len({g.group_id for g in groups}) == 1 and sorted(g.index for g in groups) == list(range(10))
    assert next(iter(groups)).group_id == collection.array_group_id(s.collection_id, s.launch_attempt)


def test_never_and_other_environments_launch_as_before_without_a_group():
    from pipeline_coordination.application.collection_calls import child_array_group

    for p in (pinned(running(sweep(4, 2, array="never"))), pinned(running(sweep(4, 2)), environment="k8s")):
        assert p.step(1).array_decision.startswith("individual: ")
        assert child_array_group(p.step(1), p.step(1).items[0]) is None
        launched = 0
        while (e := effect(p)) is not None and e.kind == "launch-item":
            p, _k = launch_next(p)
            launched += 1
        assert launched == 2


def test_a_fallback_reaches_the_step_array_decision_once():
    p = pinned(running(sweep(2, 2, array="prefer")))
    for _ in range(2):
        p, _k = launch_next(p)
    why = "individual: start-array refused: array-not-homogeneous: compute.cpus differs"
    p = collection_answers.on_item_completed(p, 1, 1, p.step(1).items[0].run_id, "succeeded", "", "c" * 40, why)
    p = collection_answers.on_item_completed(p, 1, 2, p.step(1).items[1].run_id, "succeeded", "", "d" * 40, why)
    assert p.step(1).array_decision == f"array: prefer: one Slurm array per stage (maxActive 2); then {why}"
    assert collection.with_array_start("individual: array: never", why) == "individual: array: never"


def test_a_require_collection_whose_every_failure_is_the_array_fails_array_unavailable():
    p = pinned(running(sweep(3, 3, array="require")))
    for _ in range(3):
        p, _k = launch_next(p)
    why = "refused: the concurrent-Run limit of 2 admits fewer than its 3 children at once"
    for k in (1, 2, 3):
        p = settle(collection_answers.on_item_completed(p, 1, k, f"run-{k}", "failed", "array-unavailable", "", why))
    s = p.step(1)
    assert (s.state, s.reason_code) == (d.STEP_FAILED, collection.R_ARRAY_UNAVAILABLE)
    assert s.message == f"0 of 3 children succeeded (3 failed): {why}"
    assert (p.reason_code, p.failed_step) == (collection.R_ARRAY_UNAVAILABLE, 1) and why in p.message


def test_a_failure_of_its_own_beside_array_unavailable_keeps_collection_failed():
    p = pinned(running(sweep(2, 2, array="require")))
    for _ in range(2):
        p, _k = launch_next(p)
    p = settle(collection_answers.on_item_completed(p, 1, 1, "run-1", "failed", "array-unavailable", ""))
    p = settle(collection_answers.on_item_completed(p, 1, 2, "run-2", "failed", "native-failure", ""))
    assert p.step(1).reason_code == collection.R_COLLECTION_FAILED


def test_a_cancelled_collection_names_itself_as_the_pipelines_reason():
    p = pinned(running(sweep(2, 2)))
    p, _ = launch_next(p)
    p, _ = collection_answers.request_cancel(p, 1, "m-bob", "wrong data")
    p = settle(p)
    p = settle(collection_answers.on_item_cancel_recorded(p, 1, 1, halt_code=collection.R_COLLECTION_CANCELLED))
    p = end(p, 1, "cancelled")
    assert p.state == d.FAILED and p.reason_code == collection.R_COLLECTION_CANCELLED
    assert p.message.startswith("the collection of step 1 (sweep) was cancelled: ")


def test_a_launched_child_cancelled_by_fail_fast_keeps_fail_fast_as_its_reason():
    p = pinned(running(sweep(3, 3, fail_fast=True, array="prefer")))
    for _ in range(3):
        p, _k = launch_next(p)
    p = end(p, 1, "failed")
    assert effect(p) == d.Effect("cancel-item", 1, 2)
    p = settle(collection_answers.on_item_cancel_recorded(p, 1, 2, halt_code=collection.R_FAIL_FAST))
    # The Run's own code (a member's cancel, as Execution Core sees it) does not replace it.
    p = settle(collection_answers.on_item_completed(p, 1, 2, "run-2", "cancelled", "cancelled-by-member", ""))
    assert p.step(1).items[1].reason_code == collection.R_FAIL_FAST
    # A Run that had already ended keeps its own result.
    p = settle(collection_answers.on_item_cancel_recorded(p, 1, 3, ended="succeeded",
                                                          halt_code=collection.R_FAIL_FAST))
    assert p.step(1).items[2].state == collection.SUCCEEDED and p.step(1).items[2].reason_code == ""
