"""``rerun --failed`` of a collection step: only the children that did not succeed run again (pure rules)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from metallo.parameters import ParameterError
from pipeline_coordination.domain import (
    answers,
    collection,
    collection_answers,
    collection_rerun,
    rerun,
)
from pipeline_coordination.domain import pipeline as d
from tests.unit.test_pipeline_collection_rules import (
    NOW,
    counts,
    effect,
    launch_next,
    running,
    settle,
    sweep,
)

C2 = "2" * 40
RERUN = "1b3f1c9a-1111-4222-8333-944455556666"


def started(p: d.Pipeline, commit: str = "1" * 40) -> d.Pipeline:
    assert effect(p) == d.Effect("pin", 1)
    return settle(answers.on_pinned(p, 1, d.PreparedAction("sweep", "w-sweep", 3, commit, d.BATCH, "slurm"), NOW))


def end(p: d.Pipeline, k: int, outcome: str, run: str = "") -> d.Pipeline:
    run = run or f"run-{k}"
    return settle(collection_answers.on_item_completed(p, 1, k, run, outcome, "", f"out-{k}"))


def failed_sweep(fail_fast: bool = False) -> d.Pipeline:
    """Six children, two at a time: 1 and 2 succeed, 3 fails, 4 is lost; 5 and 6 run (or are halted)."""
    p = started(running(sweep(6, 2, fail_fast=fail_fast, array="never"), "report"))
    for k, outcome in ((1, "succeeded"), (2, "succeeded"), (3, "failed"), (4, "lost")):
        while (e := effect(p)) is not None and e.kind == "launch-item" and e.item <= k:
            p, _ = launch_next(p)
        p = end(p, k, outcome)
    while (e := effect(p)) is not None and e.kind == "launch-item":
        p, _ = launch_next(p)
    for i in p.step(1).items:
        if i.state == collection.LAUNCHED:
            p = end(p, i.index, "cancelled")
    assert p.state == d.FAILED and p.step(2).state == d.SKIPPED
    return p


def test_only_children_that_did_not_succeed_run_again_and_succeeded_ones_are_carried_over():
    p = failed_sweep()
    new = rerun.rerun(p, pipeline_id=RERUN, member="m-bob", failed_only=True)
    s = new.step(1)
    assert rerun.rerun_steps(new) == [1, 2] and collection_rerun.rerun_indices(s.items) == [3, 4, 5, 6]
    kept = {i.index: i for i in s.items if i.carried_from}
    assert sorted(kept) == [1, 2] and {i.carried_from for i in kept.values()} == {p.pipeline_id}
    assert kept[1].run_id == "run-1" and kept[1].output_commit == "out-1" and kept[1].state == collection.SUCCEEDED
    fresh = [i for i in s.items if not i.carried_from]
    assert fresh == [collection.Item(k, {"seed": str(k - 1)}) for k in (3, 4, 5, 6)]
    assert counts(new)["carried"] == 2 and counts(new)["waiting"] == 4 and counts(new)["total"] == 6


def test_the_rerun_children_run_at_the_commit_pinned_when_the_step_starts_and_never_relaunch_a_kept_one():
    new = rerun.rerun(failed_sweep(), pipeline_id=RERUN, member="m-bob", failed_only=True)
    new = started(new, C2)
    s = new.step(1)
    assert s.state == d.LAUNCHED and s.pinned_commit == C2 and s.revision == 3
    assert [i.index for i in s.items if i.carried_from] == [1, 2]  # kept across the start
    launched = []
    while (e := effect(new)) is not None and e.kind == "launch-item":
        new, k = launch_next(new)
        launched.append(k)
        new = end(new, k, "succeeded")
    assert sorted(launched) == [3, 4, 5, 6]
    s = new.step(1)
    assert s.state == d.STEP_SUCCEEDED and "6 of 6 children succeeded (2 carried over)" == s.message
    assert s.items[0].run_id == "run-1" and s.items[0].carried_from  # the kept Run is untouched
    assert effect(new) == d.Effect("pin", 2)  # the dependent step now runs


def test_a_completion_of_a_carried_childs_run_changes_nothing_in_the_rerun():
    new = started(rerun.rerun(failed_sweep(), pipeline_id=RERUN, member="m-bob", failed_only=True))
    assert end(new, 1, "failed", run="run-1") == new


def test_children_halted_by_fail_fast_and_cancelled_ones_run_again():
    p = failed_sweep(fail_fast=True)
    halted = [i.index for i in p.step(1).items if i.reason_code == collection.R_FAIL_FAST]
    assert halted  # never launched because the collection halted
    new = rerun.rerun(p, pipeline_id=RERUN, member="m-bob", failed_only=True)
    assert set(halted) <= set(collection_rerun.rerun_indices(new.step(1).items))
    assert [i.index for i in new.step(1).items if i.carried_from] == [1, 2]


def test_a_chain_of_reruns_keeps_naming_the_pipeline_whose_run_it_is():
    first = rerun.rerun(failed_sweep(), pipeline_id=RERUN, member="m-bob", failed_only=True)
    first = started(first)
    while (e := effect(first)) is not None and e.kind == "launch-item":
        first, k = launch_next(first)
        first = end(first, k, "failed")
    again = rerun.rerun(first, pipeline_id="2b3f1c9a-1111-4222-8333-944455556666", member="m-bob", failed_only=True)
    origin = {i.index: i.carried_from for i in again.step(1).items}
    assert origin == {1: failed_sweep().pipeline_id, 2: failed_sweep().pipeline_id, 3: "", 4: "", 5: "", 6: ""}


def test_a_rerun_step_that_never_starts_leaves_no_child_waiting():
    new = rerun.rerun(failed_sweep(), pipeline_id=RERUN, member="m-bob", failed_only=True)
    new, _ = answers.request_stop(new, "m-bob", "not now")
    new = settle(new)
    assert new.state == d.STOPPED and new.step(1).state == d.SKIPPED
    states = {i.index: (i.state, i.reason_code) for i in new.step(1).items}
    assert states[1] == (collection.SUCCEEDED, "") and states[3] == (collection.CANCELLED, d.R_STOPPED)
    assert settle(new) == new


def test_without_failed_every_child_runs_again_and_nothing_is_carried():
    full = rerun.rerun(failed_sweep(), pipeline_id=RERUN, member="m-bob", failed_only=False)
    assert full.step(1).items == ()
    s = started(full).step(1)
    assert len(s.items) == 6 and not any(i.carried_from for i in s.items)


def test_children_that_are_not_the_shapes_expansion_fail_the_step_when_it_starts():
    new = rerun.rerun(failed_sweep(), pipeline_id=RERUN, member="m-bob", failed_only=True)
    s = new.step(1)
    bad = new.with_step(replace(s, items=(replace(s.items[0], parameters={"seed": "99"}),) + s.items[1:]))
    out = started(bad).step(1)
    assert out.state == d.STEP_FAILED and out.reason_code == collection.R_COLLECTION_INVALID
    with pytest.raises(ParameterError, match="not the expansion"):
        collection_rerun.keep_children(collection.items_of(s.collection), s.items[:3])


def test_a_rerun_array_group_holds_exactly_the_children_that_run_again():
    from pipeline_coordination.application.collection_calls import child_array_group

    p = started(running(sweep(6, 2, array="require"), "report"))
    while (e := effect(p)) is not None and e.kind == "launch-item":
        p, _ = launch_next(p)
    for k in range(1, 7):
        p = end(p, k, "succeeded" if k in (1, 4, 5) else "failed")
    new = started(rerun.rerun(p, pipeline_id=RERUN, member="m-bob", failed_only=True), "2" * 40)
    s = new.step(1)
    again = [i for i in s.items if not i.carried_from]
    assert [i.index for i in again] == [2, 3, 6]
    groups = [child_array_group(s, i) for i in again]
    # A group of all six would wait for three children that never launch again.
    assert [(g.index, g.size, g.max_active) for g in groups] == [(0, 3, 2), (1, 3, 2), (2, 3, 2)]
    assert len({g.group_id for g in groups}) == 1
    assert groups[0].group_id != child_array_group(p.step(1), p.step(1).items[1]).group_id
