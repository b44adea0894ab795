"""Pipelines against the real owners' request handling, to check the services agree on the contracts.

- the real Workload Portfolio (real git reads, revisions) with an Execution Core
  double: PrepareBranch order, PrepareAction at the branch's head after a push,
  a new revision when actions.yaml changed;
- the real Execution Core command server as well (acceptance only: no planning
  or Site runs here): LaunchRun with the step's launch key, labels and hand-off
  commit is accepted, and a stop's CancelRun is recorded on that Run and ends it.
"""

from __future__ import annotations

import uuid

import pytest

from execution_core.__main__ import MIGRATIONS as EC_MIGRATIONS
from execution_core.adaptors.governance_authority import GovernanceAuthority as EcAuthority
from execution_core.adaptors.service import ExecutionCore
from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.governance import GovernanceFile
from metallo.messaging import OutboxRelay
from metallo.persistence.engine import create_engine
from metallo.repository_policy import RepositoryPolicy
from pipeline_coordination.domain import identities
from tests.integration.pipeline_coordination_repo import ACTIONS
from tests.integration.pipeline_coordination_support import GOVERNANCE, build, teardown
from workload_portfolio.__main__ import MIGRATIONS as WP_MIGRATIONS
from workload_portfolio.adaptors.command_handlers import PortfolioCommandServer
from workload_portfolio.adaptors.git_source import GitSourceControl
from workload_portfolio.adaptors.governance_authority import GovernanceProjectAuthority
from workload_portfolio.application.preparation import Preparation

pytestmark = pytest.mark.integration


@pytest.fixture
async def h(make_database, amqp_url, bus_url, topology, tmp_path):
    """The harness with the real Workload Portfolio in place of its double."""
    harness = await build(make_database, amqp_url, topology, tmp_path)
    wp_engine = create_engine(await make_database("workload_portfolio", WP_MIGRATIONS), pool_size=4)
    await harness.portfolio.server.stop()
    authority = GovernanceProjectAuthority(GovernanceFile(GOVERNANCE))
    server = PortfolioCommandServer(
        wp_engine, bus_url("workload_portfolio"), topology, authority=authority,
        preparation=Preparation(GitSourceControl(policy=RepositoryPolicy.of(allow_local=True),
                                                     timeout_seconds=30), authority),
    )
    relay = OutboxRelay(wp_engine, bus_url("workload_portfolio"), topology, owner="workload_portfolio", poll_seconds=0.05)
    await relay.start()
    await server.start()
    yield harness
    await server.stop()
    await relay.stop()
    await wp_engine.dispose()
    await teardown(harness)


async def test_hand_off_through_the_real_workload_portfolio(h):
    await h.coordinator().start()
    pid = (await h.start_pipeline()).pipeline_id
    p = await h.until_step(pid, 1, "launched")
    assert [s.action for s in p.steps] == ["train", "eval"]
    assert p.step(1).pinned_commit == h.repo.head() == p.prepared_commit

    pushed = h.repo.push(
        {"model.bin": "weights\n", "actions.yaml": ACTIONS.replace("eval.py]", "eval.py, --fast]")}, "trained"
    )
    await h.runs.complete(h.runs.run_for(1).run_id, "succeeded", output_commit=pushed)
    p = await h.until_step(pid, 2, "launched")
    step2 = p.step(2)
    assert step2.pinned_commit == pushed == h.runs.launch_for(2).repository_commit
    assert (step2.prepared_revision, step2.revision) == (1, 2)
    assert h.runs.launch_for(2).workload_id == step2.workload_id
    await h.runs.complete(h.runs.run_for(2).run_id, "succeeded")
    await h.until_state(pid, "succeeded")
    h.runs.assert_one_launch_per_step()


async def test_real_execution_core_accepts_the_step_launch_and_records_the_stop(h, make_database, bus_url, topology):
    await h.runs.stop()  # the real Execution Core answers LaunchRun / CancelRun instead of the double
    ec_engine = create_engine(await make_database("execution_core", EC_MIGRATIONS), pool_size=4)
    core = ExecutionCore(
        engine=ec_engine,
        amqp_url=bus_url("execution_core"),
        topology=topology,
        authority=EcAuthority(GovernanceFile(GOVERNANCE)),
        parts=frozenset({"server", "relay"}),
        relay_poll_seconds=0.05,
    )
    await core.start()
    try:
        await h.coordinator().start()
        pid = (await h.start_pipeline()).pipeline_id
        p = await h.until_step(pid, 1, "launched")
        step = p.step(1)
        run = await h.client.request(
            ec.GetRun(metadata=common_pb2.QueryMetadata(acting_member="m-alice", project="demo"), run_id=step.run_id)
        )
        assert run.launch_key == identities.launch_key(pid, 1)
        assert run.launch_command_id == identities.command_id(pid, "launch", 1, 1)
        assert run.labels["pipeline_id"] == pid and run.labels["pipeline_step"] == "1"
        assert run.workload_id == step.workload_id and run.revision == step.revision

        # A second LaunchRun with the step's key (another command_id) gives the same Run.
        again = await h.client.request(
            ec.LaunchRun(
                metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member="m-alice", project="demo"),
                workload_id=step.workload_id,
                revision=step.revision,
                launch_key=identities.launch_key(pid, 1),
                labels=identities.labels(pid, 1, "train"),
                repository_commit=step.pinned_commit,
            )
        )
        assert again.run_id == step.run_id

        await h.stop_pipeline(pid)
        # The Run was not planned yet, so Execution Core ends it at once and says so in the reply.
        p = await h.until_state(pid, "stopped")
        assert p.step(1).state == "cancelled" and p.step(1).run_outcome == "cancelled"
        run = await h.client.request(
            ec.GetRun(metadata=common_pb2.QueryMetadata(acting_member="m-alice", project="demo"), run_id=step.run_id)
        )
        assert run.desired_state == "cancel" and run.cancelled_by == "m-alice"
        assert p.step(2).state == "skipped"
    finally:
        await core.stop()
        await ec_engine.dispose()


async def test_the_real_workload_portfolio_hands_over_needs_and_when(h):
    from tests.integration.test_pipeline_graphs import DIAMOND

    h.repo.push({"actions.yaml": DIAMOND}, "a graph")
    await h.coordinator().start()
    pid = (await h.start_pipeline()).pipeline_id
    p = await h.until_step(pid, 1, "launched")
    assert [(s.action, s.needs, s.when) for s in p.steps] == [
        ("a", (), "success"), ("b", (1,), "success"), ("c", (1,), "success"), ("d", (2, 3), "success"),
        ("cleanup", (4,), "failure"),
    ]
    await h.runs.complete(h.runs.run_for(1, pid).run_id, "succeeded")
    p = await h.until_step(pid, 3, "launched")
    assert p.step(2).state == "launched"  # both branches pinned through the real PrepareAction


async def test_the_real_workload_portfolio_refuses_a_cycle_with_its_line(h):
    from tests.integration.test_pipeline_graphs import DIAMOND

    cyclic = DIAMOND.replace("    command: [python, a.py]\n", "    command: [python, a.py]\n    needs: [d]\n")
    h.repo.push({"actions.yaml": cyclic}, "a cycle")
    await h.coordinator().start()
    pid = (await h.start_pipeline()).pipeline_id
    p = await h.until_state(pid, "failed")
    assert p.reason_code == "actions-invalid" and not p.steps
    assert "actions.yaml:" in p.message and "needs form a cycle" in p.message, p.message


COLLECTION = """\
version: 1
actions:
  sweep:
    type: slurm-job
    command: {shell: "python train.py --lr \\"$METALLO_PARAM_LR\\""}
    matrix: {lr: [0.1, 0.01, 0.001]}
    maxActive: 2
"""


async def test_the_real_owners_carry_a_collections_shape_and_each_childs_values(h, make_database, amqp_url,
                                                                                topology):
    """PrepareBranch hands the matrix over as written; the real Execution Core keeps each child's values
    and, the collection preferring arrays on a Slurm environment, takes all three children at once
    as one array group of maxActive 2."""
    await h.runs.stop()
    ec_engine = create_engine(await make_database("execution_core", EC_MIGRATIONS), pool_size=4)
    core = ExecutionCore(engine=ec_engine, amqp_url=amqp_url, topology=topology,
                         authority=EcAuthority(GovernanceFile(GOVERNANCE)), parts=frozenset({"server", "relay"}),
                         relay_poll_seconds=0.05)
    await core.start()
    try:
        h.repo.push({"actions.yaml": COLLECTION}, "a sweep")
        await h.coordinator().start()
        pid = (await h.start_pipeline()).pipeline_id

        async def all_launched() -> bool:
            p = await h.load(pid)
            return bool(p.steps) and sum(1 for i in p.step(1).items if i.run_id) == 3

        await h.until(all_launched)
        p = await h.load(pid)
        s = p.step(1)
        assert s.collection.matrix == (("lr", ("0.1", "0.01", "0.001")),) and s.collection.max_active == 2
        for item in s.items:
            run = await h.client.request(ec.GetRun(
                metadata=common_pb2.QueryMetadata(acting_member="m-alice", project="demo"), run_id=item.run_id))
            assert dict(run.parameters) == item.parameters
            assert run.launch_key == identities.item_key(pid, 1, 1, item.index)
            assert run.labels["collection_id"] == s.collection_id and run.revision == s.revision
        from sqlalchemy import select

        from execution_core.adaptors.tables import array_groups, array_members

        async with ec_engine.connect() as conn:
            (group,) = (await conn.execute(select(array_groups))).mappings().all()
            members = (await conn.execute(select(array_members.c.index, array_members.c.run_id))).all()
        assert (group["size"], group["max_active"], group["mode"]) == (3, 2, "prefer")
        assert {(m.index, m.run_id) for m in members} == {(i.index - 1, i.run_id) for i in s.items}
    finally:
        await core.stop()
        await ec_engine.dispose()
