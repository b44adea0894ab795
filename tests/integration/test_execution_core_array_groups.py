"""Execution Core's array groups end to end over real PostgreSQL and RabbitMQ (ADR 0032):
children prepared one by one, ONE start-array, each child continuing as its own Attempt;
fallbacks of ``prefer`` and ``require``; the group's one deadline; killed supervisors."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest
from sqlalchemy import select

from execution_core.adaptors.tables import array_groups, site_commands
from execution_core.application.faults import WorkerCrash
from execution_core.application.supervisor import RunSupervisor, site_command_id
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.site_coordination.v1 import site_coordination_pb2 as sc
from tests.integration.execution_core_support import FAST, result, revision, stack_factory

pytestmark = pytest.mark.integration

ARRAYS = replace(FAST, array_group_deadline_seconds=60)


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


class ArraySite:
    """A Site Runtime's answers at the message level, start-array included."""

    def __init__(self, refuse_array: str = "", fail: frozenset[str] = frozenset()):
        self.refuse_array = refuse_array
        self.refused_runs: set[str] = set()  # Runs whose prepare is refused
        self.fail = set(fail)

    def __call__(self, cmd: sc.AppendSiteCommand, double) -> dict:
        import json

        if cmd.kind == "prepare":
            if cmd.run_id in self.refused_runs:
                return result(cmd, "refused", "repository-commit-missing", "no such commit")
            return result(cmd, phase="prepared")
        if cmd.kind == "start-array":
            if self.refuse_array:
                return result(cmd, "refused", self.refuse_array, "compute.cpus differs")
            tasks = json.loads(cmd.payload_json)["array"]["tasks"]
            jobs = [lambda i, s=s, n=n: {"stage": s, "job_id": f"{n}_{i}"}
                    for s, n in (("stage-in", 101), ("compute", 102), ("stage-out", 103))]
            per = [{"index": t["index"], "attempt_id": t["attempt_id"],
                    "native_jobs": [j(t["index"]) for j in jobs]} for t in tasks]
            answer = result(cmd, phase="queued", native_state="PENDING", array_tasks=per)
            answer["native_jobs"] = per[0]["native_jobs"]
            return answer
        if cmd.kind == "start":
            return result(cmd, phase="queued", native_state="PENDING")
        if cmd.kind == "observe":
            if cmd.run_id in self.fail:
                return result(cmd, phase="failed", native_state="FAILED", exit_code=3,
                              failure={"stage": "compute", "code": "native-failure", "exit_code": 3})
            return result(cmd, phase="succeeded", native_state="COMPLETED", exit_code=0,
                          output_commit=uuid.uuid5(uuid.NAMESPACE_URL, cmd.run_id).hex[:40].ljust(40, "0"))
        return result(cmd)


def group(n: int, index: int, mode: str = "require", gid: str = "", max_active: int = 2) -> pb.ArrayGroup:
    return pb.ArrayGroup(group_id=gid, size=n, index=index, max_active=max_active, mode=mode)


async def launch_group(stack, n: int, mode: str = "require", launched: int | None = None,
                       workload: str = "w-train") -> tuple[str, list[str]]:
    gid = str(uuid.uuid4())
    runs = []
    for i in range(n if launched is None else launched):
        runs.append(await stack.launch(workload, 1, launch_key=f"c:{gid}:{i}", parameters={"seed": str(i)},
                                       array_group=group(n, i, mode, gid, max_active=min(2, n))))
    return gid, runs


def sent(stack, kind: str) -> list[sc.AppendSiteCommand]:
    return [c for c in stack.site.received if c.kind == kind]


async def test_a_group_is_one_start_array_and_each_child_goes_on_as_its_own_attempt(make_stack):
    site = ArraySite()
    stack = await make_stack(settings=ARRAYS, script=site)
    gid, runs = await launch_group(stack, 5)
    site.fail.add(runs[3])
    ended = [await stack.terminal(r) for r in runs]
    assert [r.outcome for r in ended] == ["succeeded", "succeeded", "succeeded", "failed", "succeeded"]
    assert len(sent(stack, "start-array")) == 1 and sent(stack, "start") == []
    (array,) = sent(stack, "start-array")
    import json

    tasks = json.loads(array.payload_json)["array"]["tasks"]
    assert [t["run_id"] for t in tasks] == runs and [t["index"] for t in tasks] == list(range(5))
    assert json.loads(array.payload_json)["array"]["max_active"] == 2
    assert array.run_id == runs[0] and array.after_command_id == site_command_id(tasks[0]["attempt_id"], "prepare", 1)
    # One array has one deadline: every child's prepare names the group's.
    assert len({json.loads(c.payload_json)["deadline"] for c in sent(stack, "prepare")}) == 1
    for i, r in enumerate(ended):
        assert r.array_start == f"array {gid} task {i}"
        assert {j.job_id for j in r.attempts[0].native_jobs} == {f"101_{i}", f"102_{i}", f"103_{i}"}
        (observe,) = [c for c in stack.site.received if c.run_id == r.run_id and c.kind == "observe"][:1]
        expected = array.metadata.command_id if i == 0 else site_command_id(tasks[i]["attempt_id"], "prepare", 1)
        assert observe.after_command_id == expected
    assert len({r.output_commit for r in ended if r.outcome == "succeeded"}) == 4
    stack.site.assert_no_duplicates()


async def test_prefer_falls_back_to_own_starts_after_a_refused_start_array(make_stack):
    stack = await make_stack(settings=ARRAYS, script=ArraySite(refuse_array="array-not-homogeneous"))
    _, runs = await launch_group(stack, 3, mode="prefer")
    ended = [await stack.terminal(r) for r in runs]
    assert [r.outcome for r in ended] == ["succeeded"] * 3
    assert len(sent(stack, "start-array")) == 1 and len(sent(stack, "start")) == 3
    assert all(r.array_start.startswith("individual: start-array refused: array-not-homogeneous") for r in ended)
    (array,) = sent(stack, "start-array")
    first_start = next(c for c in sent(stack, "start") if c.run_id == runs[0])
    assert first_start.after_command_id == array.metadata.command_id
    # Started on their own, the children still run at most maxActive (2) at once.
    active, most = set(), 0
    for c in stack.site.received:
        if c.kind == "start":
            active.add(c.run_id)
            most = max(most, len(active))
        elif c.kind == "observe":
            active.discard(c.run_id)  # the double's first observe answers the end
    assert 1 <= most <= 2
    stack.site.assert_no_duplicates()


async def test_require_fails_every_child_after_a_refused_start_array(make_stack):
    stack = await make_stack(settings=ARRAYS, script=ArraySite(refuse_array="array-not-homogeneous"))
    _, runs = await launch_group(stack, 3)
    ended = [await stack.terminal(r) for r in runs]
    assert {(r.outcome, r.reason_code) for r in ended} == {("failed", "array-unavailable")}
    assert all("array-not-homogeneous" in r.array_start for r in ended)
    assert sent(stack, "start") == []
    events = await stack.wait_events(pb.RunCompleted, runs[1])
    assert "array-not-homogeneous" in events[0].array_start


@pytest.mark.parametrize("mode", ["prefer", "require"])
async def test_a_group_that_never_forms_settles_at_its_one_deadline(make_stack, mode):
    """Two of three children are launched: the group's shared deadline settles both."""
    stack = await make_stack(settings=replace(ARRAYS, array_group_deadline_seconds=3), script=ArraySite())
    loop = asyncio.get_running_loop()
    began = loop.time()
    _, runs = await launch_group(stack, 3, mode=mode, launched=2)
    waiting = await stack.wait_for(runs[1], lambda r: r.waiting_reason == "array-group-forming")
    assert waiting.phase == "preparing"
    ended = [await stack.terminal(r, timeout=30) for r in runs]
    assert loop.time() - began >= 2.5
    assert sent(stack, "start-array") == []
    if mode == "prefer":
        assert [r.outcome for r in ended] == ["succeeded", "succeeded"]
        assert all("only 2 of 3 children were prepared" in r.array_start for r in ended)
    else:
        assert {(r.outcome, r.reason_code) for r in ended} == {("failed", "array-unavailable")}
        assert sent(stack, "start") == []


async def test_a_refused_prepare_settles_a_require_group_at_once(make_stack):
    site = ArraySite()
    stack = await make_stack(settings=replace(ARRAYS, array_group_deadline_seconds=300), script=site)
    gid = str(uuid.uuid4())
    # The refused child's Run id is known only once launched: refuse the second launch's.
    first = await stack.launch("w-train", 1, launch_key=f"c:{gid}:0", array_group=group(3, 0, gid=gid))
    second = await stack.launch("w-train", 1, launch_key=f"c:{gid}:1", array_group=group(3, 1, gid=gid))
    site.refused_runs.add(second)
    third = await stack.launch("w-train", 1, launch_key=f"c:{gid}:2", array_group=group(3, 2, gid=gid))
    ended = {r: await stack.terminal(r, timeout=20) for r in (first, second, third)}
    assert ended[second].reason_code == "repository-commit-missing"
    assert {ended[r].reason_code for r in (first, third)} == {"array-unavailable"}
    assert sent(stack, "start-array") == [] and sent(stack, "start") == []


async def test_a_kubernetes_child_is_individual_under_prefer_and_refused_under_require(make_stack):
    stack = await make_stack(settings=ARRAYS, script=ArraySite())
    stack.portfolio.add(revision("w-serve", 1, family="reconciled-service"))
    _, (refused,) = await launch_group(stack, 1, mode="require", workload="w-serve")
    run = await stack.terminal(refused)
    assert (run.outcome, run.reason_code) == ("failed", "array-unavailable")
    assert "not a Slurm Site" in run.array_start
    _, (individual,) = await launch_group(stack, 1, mode="prefer", workload="w-serve")
    run = await stack.wait_for(individual, lambda r: r.array_start != "")
    assert run.array_start.startswith("individual: ") and run.phase != "terminal"


async def test_an_array_group_is_refused_with_other_values_or_a_taken_index(make_stack):
    from metallo.messaging import Rejected

    stack = await make_stack(settings=ARRAYS, script=ArraySite())
    gid = str(uuid.uuid4())
    await stack.launch("w-train", 1, launch_key=f"c:{gid}:0", array_group=group(3, 0, gid=gid))
    for bad in (group(4, 1, gid=gid), group(3, 0, gid=gid), group(3, 3, gid=gid), group(3, 1, gid="x")):
        with pytest.raises(Rejected) as refused:
            await stack.launch("w-train", 1, launch_key=f"c:{gid}:{uuid.uuid4()}", array_group=bad)
        assert refused.value.code == "invalid-argument"


async def test_killed_supervisors_send_one_start_array_and_lose_no_child(make_stack):
    """Supervisors die after deciding (the dispatch included) or before committing: the group
    still has exactly one start-array and every child succeeds."""
    # One Run per claim: a crash leaves only that Run leased, for one lease period.
    settings = replace(ARRAYS, supervisor_lease_seconds=1.0, launch_lease_seconds=1.0, batch=1)
    stack = await make_stack(settings=settings, script=ArraySite(),
                             parts=frozenset({"server", "consumer", "relay", "launch"}))
    gid, runs = await launch_group(stack, 6)
    arrivals = [0]

    async def hook(where: str) -> None:
        if where in ("supervisor:decided", "supervisor:before-commit"):
            arrivals[0] += 1
            if arrivals[0] % 3 == 1:
                raise WorkerCrash(where)

    crashes = 0
    deadline = asyncio.get_running_loop().time() + 90
    while asyncio.get_running_loop().time() < deadline:
        phases = [(await stack.get(r)).phase for r in runs]
        if all(p == "terminal" for p in phases):
            break
        supervisor = RunSupervisor(stack.core.sessions, stack.core.store, stack.core.outbox, settings,
                                   fault=hook, groups=stack.core.groups)
        try:
            await supervisor.run_once()
        except WorkerCrash:
            crashes += 1
        await asyncio.sleep(0.05)
    ended = [await stack.terminal(r, timeout=5) for r in runs]
    assert crashes > 0 and [r.outcome for r in ended] == ["succeeded"] * 6
    assert len(sent(stack, "start-array")) == 1 and sent(stack, "start") == []
    stack.site.assert_no_duplicates()
    async with stack.engine.connect() as conn:
        state = (await conn.execute(select(array_groups.c.state).where(array_groups.c.group_id == gid))).scalar()
        relayed = (await conn.execute(select(site_commands.c.run_id).where(
            site_commands.c.relayed_by.is_not(None)))).scalars().all()
    assert state == "started" and sorted(relayed) == sorted(runs)


async def test_prefer_falls_back_at_once_when_the_project_limit_admits_fewer_children(make_stack):
    """The demo Project runs at most 10 Runs at once: a group of 12 can never be one array,
    so it falls back when planning first holds a child, not at its deadline."""
    stack = await make_stack(settings=replace(ARRAYS, array_group_deadline_seconds=300), script=ArraySite())
    loop = asyncio.get_running_loop()
    began = loop.time()
    _, runs = await launch_group(stack, 12, mode="prefer")
    ended = [await stack.terminal(r, timeout=60) for r in runs]
    assert [r.outcome for r in ended] == ["succeeded"] * 12 and loop.time() - began < 60
    assert all("concurrent-Run limit of 10 admits fewer than its 12" in r.array_start for r in ended)
    assert sent(stack, "start-array") == [] and len(sent(stack, "start")) == 12


async def test_require_fails_at_once_when_the_project_limit_admits_fewer_children(make_stack):
    """A ``require`` group of 12 under the demo Project's limit of 10 can never form: every
    child ends ``array-unavailable`` when planning first holds one, not at the deadline."""
    stack = await make_stack(settings=replace(ARRAYS, array_group_deadline_seconds=300), script=ArraySite())
    loop = asyncio.get_running_loop()
    began = loop.time()
    _, runs = await launch_group(stack, 12, mode="require")
    ended = [await stack.terminal(r, timeout=60) for r in runs]
    assert loop.time() - began < 60
    assert {(r.outcome, r.reason_code) for r in ended} == {("failed", "array-unavailable")}
    assert all(r.array_start == "refused: the concurrent-Run limit of 10 admits fewer than its 12 "
               "children at once" for r in ended), {r.array_start for r in ended}
    assert sent(stack, "start-array") == [] and sent(stack, "start") == []
