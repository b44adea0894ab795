"""Graph Pipelines through Pipeline Coordination's real parts (PostgreSQL, RabbitMQ, git).

A diamond (a → b, a → c, b and c → d): b and c are launched together and d is
pinned to the commit holding both pushes; a failing branch skips its dependents
while the other branch finishes, and the Pipeline reports a partial failure;
``when: failure`` runs a clean-up; duplicate and out-of-order completions have
no second effect; RerunPipeline --failed relaunches only what did not succeed.
"""

from __future__ import annotations

import uuid

import pytest

from tests.integration.pipeline_coordination_repo import git
from tests.integration.pipeline_coordination_support import Harness, build, teardown

pytestmark = pytest.mark.integration

DIAMOND = """\
version: 1
actions:
  a:
    type: slurm-job
    command: [python, a.py]
  b:
    type: slurm-job
    command: [python, b.py]
    needs: [a]
  c:
    type: slurm-job
    command: [python, c.py]
    needs: [a]
  d:
    type: slurm-job
    command: [python, d.py]
    needs: [b, c]
  cleanup:
    type: slurm-job
    command: [python, cleanup.py]
    needs: [d]
    when: failure
"""


@pytest.fixture
async def h(make_database, amqp_url, topology, tmp_path):
    harness = await build(make_database, amqp_url, topology, tmp_path, actions_yaml=DIAMOND)
    await harness.coordinator().start()
    yield harness
    await teardown(harness)


async def play(h: Harness, pid: str, index: int, outcome: str = "succeeded") -> str:
    """Step ``index``'s Run pushes a file named after its action, then ends; the pushed commit."""
    p = await h.until_step(pid, index, "launched")
    action = p.step(index).action
    pushed = h.repo.push({f"{action}.txt": f"{action}\n"}, action) if outcome == "succeeded" else ""
    await h.runs.complete(h.runs.run_for(index, pid).run_id, outcome, output_commit=pushed)
    return pushed


async def test_diamond_runs_b_and_c_together_and_d_reads_both_pushes(h):
    pid = (await h.start_pipeline()).pipeline_id
    await play(h, pid, 1)
    p = await h.until_step(pid, 3, "launched")
    assert p.step(2).state == "launched", "b and c run at once"
    assert p.step(2).pinned_commit == p.step(3).pinned_commit == p.step(1).output_commit
    await play(h, pid, 3)
    await play(h, pid, 2)
    p = await h.until_step(pid, 4, "launched")
    d = p.step(4)
    for name in ("a.txt", "b.txt", "c.txt"):
        git("--git-dir", h.repo.url, "cat-file", "-e", f"{d.pinned_commit}:{name}")
    assert h.runs.launch_for(4, pid).repository_commit == d.pinned_commit == h.repo.head()
    await play(h, pid, 4)
    p = await h.until_state(pid, "succeeded")
    assert p.step(5).state == "skipped" and p.step(5).reason_code == "needs-succeeded"
    got = await h.get(pid)
    assert [list(s.needs) for s in got.steps] == [[], [1], [1], [2, 3], [4]]
    assert got.counts.succeeded == 4 and got.counts.skipped == 1 and not got.partial
    (event,) = await h.completed_events(pid)
    assert event.outcome == "succeeded" and event.counts.total == 5
    h.runs.assert_one_launch_per_step()


async def test_failing_branch_skips_dependents_reports_partial_failure_and_runs_the_clean_up(h):
    pid = (await h.start_pipeline()).pipeline_id
    await play(h, pid, 1)
    await h.until_step(pid, 3, "launched")
    await play(h, pid, 2, "failed")
    p = await h.until_step(pid, 4, "skipped")
    assert p.state == "running" and p.step(3).state == "launched", "the other branch goes on"
    assert "2 (b, failed)" in p.step(4).message
    await play(h, pid, 3)
    await play(h, pid, 5)  # the clean-up runs because d did not succeed
    p = await h.until_state(pid, "failed")
    assert p.failed_step == 2 and p.step(5).state == "succeeded"
    got = await h.get(pid)
    assert got.partial and (got.counts.succeeded, got.counts.failed, got.counts.skipped) == (3, 1, 1)
    (event,) = await h.completed_events(pid)
    assert event.outcome == "failed" and event.partial and event.failed_action == "b"
    assert h.runs.launch_for(4, pid) is None


async def test_duplicate_and_out_of_order_completions_have_no_second_effect(h):
    pid = (await h.start_pipeline()).pipeline_id
    await play(h, pid, 1)
    await h.until_step(pid, 3, "launched")
    run_c = h.runs.run_for(3, pid)
    await play(h, pid, 3)
    await h.until_step(pid, 3, "succeeded")
    before = await h.load(pid)
    receipts = await h.inbox_count()
    await h.runs.republish(run_c.run_id)  # the same end again, as a new message
    h.runs.runs[run_c.run_id].outcome = "failed"
    await h.runs.republish(run_c.run_id)  # a contradicting late end: the first end wins
    await h.until(lambda: _grew(h, receipts + 2))
    assert (await h.load(pid)).step(3) == before.step(3)
    await play(h, pid, 2)
    await play(h, pid, 4)
    p = await h.until_state(pid, "succeeded")
    assert p.step(3).run_outcome == "succeeded"
    assert len(await h.completed_events(pid)) == 1


async def _grew(h: Harness, count: int) -> bool:
    return await h.inbox_count() >= count


async def test_rerun_failed_relaunches_only_what_did_not_succeed(h):
    pid = (await h.start_pipeline()).pipeline_id
    await play(h, pid, 1)
    await h.until_step(pid, 3, "launched")
    await play(h, pid, 2, "failed")
    await play(h, pid, 3)
    await play(h, pid, 5)
    original = await h.until_state(pid, "failed")
    head = h.repo.head()  # the clean-up pushed last

    cid = str(uuid.uuid4())
    reply = await h.rerun_pipeline(pid, failed_only=True, command_id=cid)
    assert reply.rerun_of == pid and list(reply.rerun_steps) == [2, 4]
    again = await h.rerun_pipeline(pid, failed_only=True, command_id=cid)
    assert again.pipeline_id == reply.pipeline_id  # the same command is the same rerun
    new = reply.pipeline_id
    b = await play(h, new, 2)
    p = await h.until_step(new, 2, "succeeded")
    assert p.step(2).pinned_commit == head == original.step(5).output_commit  # the branch head then
    await play(h, new, 4)
    p = await h.until_state(new, "succeeded")
    assert p.step(1).carried_from == pid and p.step(1).run_id == original.step(1).run_id
    assert p.step(5).carried_from == pid
    git("--git-dir", h.repo.url, "cat-file", "-e", f"{p.step(4).pinned_commit}:b.txt")
    assert h.runs.launch_for(1, new) is None and h.runs.launch_for(3, new) is None
    assert b and (await h.load(pid)) == original, "the original is never changed"
    got = await h.get(new)
    assert got.rerun_of == pid and got.steps[0].carried_from == pid

    from metallo.messaging import Rejected

    with pytest.raises(Rejected) as e:
        await h.rerun_pipeline(new, failed_only=True)
    assert e.value.code == "nothing-to-rerun"


async def test_a_cycle_reaching_the_coordinator_fails_the_pipeline_before_any_step(make_database, amqp_url, topology, tmp_path):
    """Workload Portfolio refuses a cycle with its line; the coordinator re-checks what it is given."""
    cyclic = DIAMOND.replace("    command: [python, a.py]\n", "    command: [python, a.py]\n    needs: [d]\n")
    h = await build(make_database, amqp_url, topology, tmp_path, actions_yaml=cyclic)
    try:
        await h.coordinator().start()
        pid = (await h.start_pipeline()).pipeline_id
        p = await h.until_state(pid, "failed")
        assert p.reason_code == "actions-invalid" and "cycle" in p.message and not p.steps
        assert h.runs.launches == []
    finally:
        await teardown(h)


async def test_max_active_one_runs_the_diamond_one_step_at_a_time(h):
    pid = (await h.start_pipeline(max_active=1)).pipeline_id
    await play(h, pid, 1)
    p = await h.until_step(pid, 2, "launched")
    assert p.step(3).state == "waiting" and p.max_active == 1
    await play(h, pid, 2)
    await play(h, pid, 3)
    await play(h, pid, 4)
    await h.until_state(pid, "succeeded")


async def test_the_saved_graph_is_immutable(h):
    from dataclasses import replace

    from metallo.persistence.engine import session_factory
    from pipeline_coordination.adaptors.store import SqlPipelineStore

    pid = (await h.start_pipeline()).pipeline_id
    await h.until_step(pid, 1, "launched")
    store = SqlPipelineStore()
    async with session_factory(h.engine)() as session, session.begin():
        p, _meta = await store.load(session, pid, lock=True)
        changed = p.with_step(replace(p.step(4), needs=(2,)))
        with pytest.raises(ValueError, match="immutable"):
            await store.save(session, p, changed)
    assert (await h.load(pid)).step(4).needs == (2, 3)
