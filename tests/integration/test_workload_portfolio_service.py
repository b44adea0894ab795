"""Workload Portfolio over real PostgreSQL, RabbitMQ and git repositories."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import aio_pika
import pytest
from sqlalchemy import text

from metallo.common.v1 import common_pb2
from metallo.governance import GovernanceFile
from metallo.messaging import OutboxRelay, Rejected, RequestClient
from metallo.persistence.engine import create_engine
from metallo.repository_policy import RepositoryPolicy
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.unit.workload_portfolio_repos import ACTIONS, commit, make_repo
from workload_portfolio.__main__ import MIGRATIONS
from workload_portfolio.adaptors.command_handlers import PortfolioCommandServer
from workload_portfolio.adaptors.git_source import GitSourceControl
from workload_portfolio.adaptors.governance_authority import GovernanceProjectAuthority
from workload_portfolio.application.preparation import Preparation

pytestmark = pytest.mark.integration

GOVERNANCE = """\
version: 1
sites:
  lab-slurm: {environment: slurm, ready: true, max_wall_seconds: 86400, gpu_classes: {}}
  lab-k8s: {environment: k8s, ready: true}
members:
  m-alice: {bindings: {lab-slurm: {site_username: alice, account: demo}}}
  m-bob: {bindings: {lab-slurm: {site_username: bob, account: demo}}}
  m-carol: {}
  m-zed: {}
projects:
  demo:
    sites: [lab-slurm, lab-k8s]
    members:
      m-alice: [workloads.prepare, workloads.read, runs.launch, runs.read]
      m-bob: [runs.read, pipelines.read]
      m-carol: [runs.launch]
  other:
    sites: [lab-k8s]
    members:
      m-zed: [workloads.prepare, workloads.read]
"""
EVENT_KEY = "workload_portfolio.WorkloadRevisionCreated.v1"


class ProbedSource:
    """Real git reads that also record how many connections of the command server's
    engine are checked out while git runs: with one request at a time it must be
    none, as no git call happens inside a transaction (DESIGN.md, Persistence)."""

    def __init__(self, inner: GitSourceControl):
        self.inner = inner
        self.engine = None
        self.checked_out: list[int] = []

    async def read_file(self, repository_url, **kw):
        self.checked_out.append(self.engine.pool.checkedout())
        return await self.inner.read_file(repository_url, **kw)

    async def list_branches(self, repository_url):
        self.checked_out.append(self.engine.pool.checkedout())
        return await self.inner.list_branches(repository_url)


class Stack:
    def __init__(self, client, engine, repo: Path, governance: Path, events: asyncio.Queue, source):
        self.client, self.engine, self.repo, self.governance, self.events = client, engine, repo, governance, events
        self.source = source

    def meta(self, member="m-alice", project="demo", command_id=None):
        return common_pb2.CommandMetadata(command_id=command_id or str(uuid.uuid4()),
                                          acting_member=member, project=project)

    async def prepare(self, action, *, member="m-alice", project="demo", branch="main", commit="",
                      command_id=None, url=None) -> wp.PrepareActionReply:
        return await self.client.request(wp.PrepareAction(
            metadata=self.meta(member, project, command_id), repository_url=url or str(self.repo),
            branch=branch, commit=commit, action=action), timeout=30)

    async def get(self, workload_id, revision=0, member="m-alice", project="demo") -> wp.WorkloadRevision:
        return await self.client.request(wp.GetWorkloadRevision(
            metadata=common_pb2.QueryMetadata(acting_member=member, project=project),
            workload_id=workload_id, revision=revision), timeout=30)

    async def revisions(self) -> int:
        async with self.engine.connect() as conn:
            return (await conn.execute(text("SELECT count(*) FROM workload_revisions"))).scalar()

    async def next_events(self, n: int) -> list[wp.WorkloadRevisionCreated]:
        return [await asyncio.wait_for(self.events.get(), 30) for _ in range(n)]


@pytest.fixture
async def stack(tmp_path, make_database, amqp_url, bus_url, topology):
    repo = tmp_path / "repo"
    make_repo(repo, {"actions.yaml": ACTIONS, "train.py": "print('train')\n"})
    gov_path = tmp_path / "governance.yaml"
    gov_path.write_text(GOVERNANCE)
    url = await make_database("workload_portfolio", MIGRATIONS)
    engine = create_engine(url)
    authority = GovernanceProjectAuthority(GovernanceFile(gov_path))
    source = ProbedSource(GitSourceControl(policy=RepositoryPolicy.of(allow_local=True),
                                           timeout_seconds=30))
    source.engine = server_engine = create_engine(url)  # the server's own pool, probed above
    server = PortfolioCommandServer(server_engine, bus_url("workload_portfolio"), topology, authority=authority,
                                    preparation=Preparation(source, authority))
    relay = OutboxRelay(engine, bus_url("workload_portfolio"), topology, owner="workload_portfolio", poll_seconds=0.05)
    # An event consumer queue, bound before anything is published.
    conn = await aio_pika.connect_robust(amqp_url)
    channel = await conn.channel()
    exchange = await channel.declare_exchange(topology.events_exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    queue = await channel.declare_queue(f"{topology.prefix}wp-test-events", exclusive=True)
    await queue.bind(exchange, EVENT_KEY)
    events: asyncio.Queue = asyncio.Queue()

    async def on_event(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        async with message.process():
            assert message.type == "metallo.workload_portfolio.v1.WorkloadRevisionCreated"
            events.put_nowait(wp.WorkloadRevisionCreated.FromString(message.body))

    await queue.consume(on_event)
    await server.start()
    await relay.start()
    client = RequestClient(bus_url("go_api"), topology)
    await client.start()
    yield Stack(client, engine, repo, gov_path, events, source)
    await client.close()
    await relay.stop()
    await server.stop()
    await conn.close()
    await server_engine.dispose()
    await engine.dispose()


async def invalid_problems(stack, actions_yaml: str, action: str = "a") -> list[str]:
    """Commit ``actions_yaml``, prepare ``action``: its ``actions-invalid`` refusal's
    problems, in detail-key order."""
    commit(stack.repo, {"actions.yaml": actions_yaml})
    with pytest.raises(Rejected) as exc:
        await stack.prepare(action)
    assert exc.value.code == "actions-invalid"
    return [v for k, v in sorted(exc.value.details.items()) if k.startswith("problem.")]


async def test_each_action_type_becomes_a_revision_with_its_family_and_event(stack):
    expected = {
        "train": ("slurm-job", "slurm", "queued-batch", ""),
        "evaluate": ("k8s-job", "k8s", "queued-batch", ""),
        "app": ("k8s-deployment", "k8s", "reconciled-service", "application"),
        "serve": ("k8s-inferenceservice", "k8s", "reconciled-service", "huggingface-inference"),
    }
    head = (await asyncio.to_thread(lambda: __import__("subprocess").run(
        ["git", "-C", str(stack.repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()))
    replies = {}
    for action, (atype, env, family, kind) in expected.items():
        r = await stack.prepare(action)
        assert (r.action_type, r.environment, r.family, r.service_kind) == (atype, env, family, kind)
        assert (r.revision, r.created, r.commit, r.action) == (1, True, head, action)
        assert r.spec_digest.startswith("sha256:") and len(r.spec_digest) == 71
        replies[action] = r
    saved = await stack.get(replies["train"].workload_id, 1)
    spec = json.loads(saved.spec_json)
    assert spec["command"] == {"argv": ["python", "train.py", "--epochs", "3"]}
    assert spec["resources"] == {"cpus": 2, "memoryMiB": 2048, "gpus": 0, "wallTimeSeconds": 600, "nodes": 1}
    assert spec["repository"] == {"url": str(stack.repo), "commit": head}
    assert (saved.project, saved.branch, saved.commit, saved.spec_digest) == ("demo", "main", head,
                                                                               replies["train"].spec_digest)
    assert json.loads((await stack.get(replies["evaluate"].workload_id)).spec_json)["command"] == {
        "shell": "python eval.py > results.txt"}
    events = await stack.next_events(4)
    assert sorted(e.action for e in events) == sorted(expected)
    assert all(e.revision == 1 and e.acting_member == "m-alice" and e.commit == head for e in events)


async def test_duplicate_prepare_reuses_and_replay_returns_the_saved_outcome(stack):
    cid = str(uuid.uuid4())
    first = await stack.prepare("train", command_id=cid)
    reads = len(stack.source.checked_out)
    replay = await stack.prepare("train", command_id=cid)
    assert replay == first and first.created
    assert len(stack.source.checked_out) == reads  # a replay is answered without reading git
    again = await stack.prepare("train")  # a new command for the same action and commit
    assert (again.workload_id, again.revision, again.created) == (first.workload_id, 1, False)
    with pytest.raises(Rejected) as exc:
        await stack.prepare("evaluate", command_id=cid)
    assert exc.value.code == "idempotency-conflict"
    assert await stack.revisions() == 1
    assert len(await stack.next_events(1)) == 1
    async with stack.engine.connect() as conn:  # the reuse queued no event
        events = (await conn.execute(text(
            "SELECT count(*) FROM outbox_messages WHERE type = 'metallo.workload_portfolio.v1.WorkloadRevisionCreated'"
        ))).scalar()
    assert events == 1


async def test_concurrent_prepares_create_exactly_one_revision(stack):
    results = await asyncio.gather(*(stack.prepare("train") for _ in range(8)))
    assert sum(r.created for r in results) == 1
    assert {(r.workload_id, r.revision) for r in results} == {(results[0].workload_id, 1)}
    # and again once the branch has moved: exactly one revision 2
    commit(stack.repo, {"actions.yaml": ACTIONS.replace('"3"', '"4"')})
    results = await asyncio.gather(*(stack.prepare("train") for _ in range(8)))
    assert sum(r.created for r in results) == 1
    assert {r.revision for r in results} == {2}
    assert await stack.revisions() == 2


async def test_a_moved_branch_revises_and_leaves_the_saved_revision_unchanged(stack):
    first = await stack.prepare("train")
    before = await stack.get(first.workload_id, 1)
    new_commit = commit(stack.repo, {"actions.yaml": ACTIONS.replace("cpus: 2", "cpus: 4")})
    second = await stack.prepare("train")
    assert (second.workload_id, second.revision, second.created, second.commit) == (
        first.workload_id, 2, True, new_commit)
    assert second.spec_digest != first.spec_digest
    assert await stack.get(first.workload_id, 1) == before  # revision 1 is immutable
    latest = await stack.get(first.workload_id, 0)
    assert latest.revision == 2 and json.loads(latest.spec_json)["resources"]["cpus"] == 4
    # preparing by the old commit finds revision 1 again (same spec, same commit)
    pinned = await stack.prepare("train", branch="", commit=first.commit)
    assert (pinned.revision, pinned.created, pinned.commit) == (1, False, first.commit)
    # one request at a time: no connection of the server was held while git ran
    assert len(stack.source.checked_out) == 3 and set(stack.source.checked_out) == {0}
    async with stack.engine.begin() as conn:
        with pytest.raises(Exception, match="immutable"):
            await conn.execute(text("UPDATE workload_revisions SET branch = 'x'"))


async def test_permission_is_checked_against_the_current_governance_file(stack):
    for member, project, outside in (("m-zed", "demo", True), ("m-bob", "demo", False),
                                     ("m-nobody", "demo", True)):
        with pytest.raises(Rejected) as exc:
            await stack.prepare("train", member=member, project=project)
        assert exc.value.code == "permission-denied", (member, project)
        assert ("not a member of Project demo" in exc.value.message) is outside
    # A Project the governance file does not know is named as such, and no other is.
    with pytest.raises(Rejected) as exc:
        await stack.prepare("train", member="m-alice", project="nope")
    assert exc.value.code == "project-not-found"
    assert exc.value.message == "Project nope is unknown to the Project authority"
    assert await stack.revisions() == 0
    carol = await stack.prepare("train", member="m-carol")  # runs.launch also allows preparing
    assert carol.created
    assert (await stack.get(carol.workload_id, member="m-bob")).revision == 1  # runs.read reads
    with pytest.raises(Rejected) as exc:
        await stack.get(carol.workload_id, member="m-zed", project="other")
    assert exc.value.code == "not-found"  # another Project's Workload is not visible
    with pytest.raises(Rejected) as exc:
        await stack.get(carol.workload_id, member="m-zed", project="demo")
    assert exc.value.code == "permission-denied"
    # The operator removes Carol's capability: the next request is refused.
    stack.governance.write_text(GOVERNANCE.replace("m-carol: [runs.launch]", "m-carol: []"))
    with pytest.raises(Rejected) as exc:
        await stack.prepare("train", member="m-carol")
    assert exc.value.code == "permission-denied"
    stack.governance.write_text("version: 2\n")
    with pytest.raises(Rejected) as exc:
        await stack.prepare("train")
    assert exc.value.code == "governance-unavailable"


async def test_source_and_file_errors_are_distinct_rejections(stack, tmp_path):
    cases = [
        ({"action": "train", "branch": "nope"}, "branch-not-found"),
        ({"action": "train", "url": str(tmp_path / "missing")}, "repository-not-found"),
        ({"action": "train", "branch": "", "commit": "0" * 40}, "commit-not-found"),
        ({"action": "nope"}, "action-not-found"),
        ({"action": "train", "branch": "", "commit": "xyz"}, "invalid-argument"),
    ]
    for kw, code in cases:
        with pytest.raises(Rejected) as exc:
            await stack.prepare(**kw)
        assert exc.value.code == code, (kw, exc.value)
    problems = await invalid_problems(stack, "version: 1\nactions:\n  a:\n    type: k8s-job\n    command: 5\n"
                                             "    resources: {gpus: yes}\n")
    assert len(problems) == 2
    assert problems[0].startswith("actions.yaml:5:14: actions.a.command:")
    assert problems[1].startswith("actions.yaml:6:23: actions.a.resources.gpus:")
    (stack.repo / "actions.yaml").unlink()
    from tests.unit.workload_portfolio_repos import git
    git(stack.repo, "commit", "-qam", "remove")
    with pytest.raises(Rejected) as exc:
        await stack.prepare("train")
    assert exc.value.code == "file-not-found"
    assert await stack.revisions() == 0


async def test_prepare_branch_in_file_order_and_list_workloads_paginated(stack):
    reply = await stack.client.request(wp.PrepareBranch(
        metadata=stack.meta(), repository_url=str(stack.repo), branch="main"), timeout=30)
    assert [a.action for a in reply.actions] == ["train", "evaluate", "app", "serve"]
    assert all(a.commit == reply.commit and a.created and a.revision == 1 for a in reply.actions)
    again = await stack.client.request(wp.PrepareBranch(
        metadata=stack.meta(), repository_url=str(stack.repo), branch="main"), timeout=30)
    assert [a.created for a in again.actions] == [False] * 4
    seen, token = [], ""
    for _ in range(3):
        page = await stack.client.request(wp.ListWorkloads(
            metadata=common_pb2.QueryMetadata(acting_member="m-bob", project="demo"),
            page=common_pb2.PageRequest(page_size=3, page_token=token)), timeout=30)
        seen += [w.action for w in page.workloads]
        token = page.page.next_page_token
        if not token:
            break
    assert seen == ["train", "evaluate", "app", "serve"]
    with pytest.raises(Rejected) as exc:
        await stack.client.request(wp.ListWorkloads(
            metadata=common_pb2.QueryMetadata(acting_member="m-zed", project="demo")), timeout=30)
    assert exc.value.code == "permission-denied"
    empty = await stack.client.request(wp.ListWorkloads(
        metadata=common_pb2.QueryMetadata(acting_member="m-zed", project="other")), timeout=30)
    assert list(empty.workloads) == [] and empty.page.next_page_token == ""


async def test_policy_refusals_change_nothing(stack):
    for url, code in (("https://169.254.169.254/latest/meta-data/x.git",
                       "repository-host-not-allowed"),
                      ("http://127.0.0.1/x.git", "repository-scheme-not-allowed")):
        with pytest.raises(Rejected) as exc:
            await stack.prepare("train", url=url)
        assert exc.value.code == code, url
    problems = await invalid_problems(stack, "version: 1\nactions:\n  a:\n    type: k8s-job\n"
                                             "    command: [x]\n    runtime:\n      environment:\n"
                                             "        OK: yes\n        LD_PRELOAD: /tmp/x.so\n")
    assert len(problems) == 1 and problems[0].startswith(
        "actions.yaml:9:9: actions.a.runtime.environment.LD_PRELOAD: LD_PRELOAD is forbidden")
    assert await stack.revisions() == 0


async def test_branches_are_listed_for_who_may_prepare_or_read_outside_a_transaction(stack):
    from tests.unit.workload_portfolio_repos import git

    git(stack.repo, "branch", "dev")
    tip = git(stack.repo, "rev-parse", "HEAD")

    async def branches(member="m-alice", project="demo", url=None):
        return await stack.client.request(wp.ListBranches(
            metadata=common_pb2.QueryMetadata(acting_member=member, project=project),
            repository_url=url if url is not None else str(stack.repo)), timeout=30)

    for member in ("m-alice", "m-bob", "m-carol"):  # prepare, runs.read, runs.launch
        reply = await branches(member)
        assert [(b.name, b.commit) for b in reply.branches] == [("dev", tip), ("main", tip)]
        assert reply.default_branch == "main" and not reply.truncated
    assert set(stack.source.checked_out) == {0}  # git ran with no connection held
    for member, project, code in (("m-zed", "demo", "permission-denied"),
                                  ("m-alice", "nope", "project-not-found")):
        with pytest.raises(Rejected) as exc:
            await branches(member, project)
        assert exc.value.code == code
    with pytest.raises(Rejected) as exc:
        await branches(url=str(stack.repo.parent / "missing"))
    assert exc.value.code == "repository-not-found"
    with pytest.raises(Rejected) as exc:
        await branches(url="ssh://example.org/x.git")
    assert exc.value.code == "repository-scheme-not-allowed"
    # Refused access never reached git: three reads, the missing one and the ssh URL
    # (which the repository policy refuses before git runs).
    assert len(stack.source.checked_out) == 5


async def test_text_no_store_accepts_is_refused_actions_invalid_with_its_line(stack):
    # A NUL in a matrix value and a lone surrogate in an environment key: both are
    # refused before anything is saved, and the reply itself encodes.
    problems = await invalid_problems(stack, 'version: 1\nactions:\n  a:\n    type: slurm-job\n'
                                             '    command: [x]\n    matrix: {x: ["a\\0b"]}\n'
                                             '    runtime: {environment: {"B\\ud800": "1"}}\n')
    assert problems == [
        "actions.yaml:6:18: actions.a.matrix.x[0]: text holds a NUL character (\\0), which cannot be "
        "stored; remove it",
        "actions.yaml:7:29: actions.a.runtime.environment.B\\ud800: text holds a lone surrogate "
        "(\\ud800), which is not valid UTF-8; write the character itself or its 8-digit "
        "\\UXXXXXXXX escape",
    ]
    assert await stack.revisions() == 0
