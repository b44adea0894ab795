"""Harness of the Pipeline Coordination integration tests.

Real PostgreSQL, RabbitMQ and git; Pipeline Coordination's real parts. Its
neighbours are replaced at the message level only:

- :class:`PortfolioDouble` — a ``workload_portfolio`` CommandServer answering
  PrepareBranch / PrepareAction by reading ``actions.yaml`` from a real bare git
  repository at the branch's current commit (a changed action gets a new
  revision, as Workload Portfolio does);
- :class:`RunsDouble` — an ``execution_core`` CommandServer recording every
  LaunchRun / CancelRun, answering GetRun, and publishing ``RunCompleted``
  through its own transactional outbox and relay, as Execution Core does.
  The test plays "the step's Run": it pushes to the repository, then completes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.governance import GovernanceFile
from metallo.messaging import CommandServer, Outbox, OutboxRelay, Rejected, RequestClient, Topology
from metallo.messaging.schema import TABLES
from metallo.persistence.engine import create_engine, session_factory
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from pipeline_coordination.adaptors.governance_authority import GovernanceAuthority
from pipeline_coordination.adaptors.service import PipelineCoordination
from pipeline_coordination.adaptors.store import SqlPipelineStore
from pipeline_coordination.application.faults import FaultHook, no_fault
from pipeline_coordination.application.settings import Settings
from pipeline_coordination.domain.pipeline import Pipeline
from tests.bus import role_url
from workload_portfolio.adaptors.command_handlers import collection_shape

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "services" / "pipeline_coordination" / "migrations"
GOVERNANCE = ROOT / "examples" / "governance.yaml"

FAST = Settings(
    poll_seconds=0.05,
    lease_seconds=1.0,
    request_timeout_seconds=5.0,
    service_poll_seconds=0.1,
    batch_recheck_seconds=30.0,
    service_ready_timeout_seconds=60.0,
    retry_base_seconds=0.1,
    retry_max_seconds=0.5,
)

TYPES = {
    "slurm-job": ("queued-batch", "slurm", ""),
    "k8s-job": ("queued-batch", "k8s", ""),
    "k8s-deployment": ("reconciled-service", "k8s", "application"),
    "k8s-inferenceservice": ("reconciled-service", "k8s", "huggingface-inference"),
}


# ---------------------------------------------------------------- git


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git with fixed arguments (no shell) and return its stdout."""
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "HOME": str(cwd or "/tmp"),
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


ACTIONS = """\
version: 1
actions:
  train:
    type: slurm-job
    command: [python, train.py]
  eval:
    type: slurm-job
    command: [python, eval.py]
"""


@dataclass
class Repo:
    """A bare origin (the repository_url) and a work clone that plays the steps' pushes."""

    origin: Path
    work: Path

    @classmethod
    def create(cls, base: Path, actions_yaml: str = ACTIONS) -> Repo:
        origin, work = base / "origin.git", base / "work"
        git("init", "--bare", "-b", "main", str(origin))
        git("clone", str(origin), str(work))
        git("checkout", "-b", "main", cwd=work)
        repo = cls(origin, work)
        repo.push({"actions.yaml": actions_yaml, "README": "demo\n"}, "initial")
        return repo

    @property
    def url(self) -> str:
        return str(self.origin)

    def push(self, files: dict[str, str], message: str) -> str:
        """Commit ``files`` on main and push; return the new commit (what a stage-out does)."""
        for name, text in files.items():
            (self.work / name).write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-m", message, cwd=self.work)
        git("push", "origin", "main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def head(self) -> str:
        return git("--git-dir", str(self.origin), "rev-parse", "refs/heads/main")


# ---------------------------------------------------------------- doubles


async def messaging_database(make_database, name: str) -> AsyncEngine:
    """A throw-away database holding only the messaging tables (for a double)."""
    url = await make_database(name)
    engine = create_engine(url, pool_size=4)
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: next(iter(TABLES.values())).metadata.create_all(c))
    return engine


def _collection_fields(spec) -> dict | None:
    """The collection fields of one action as Workload Portfolio's ActionsFile.collection gives them."""
    if "matrix" not in spec and "parameters" not in spec:
        return None
    return json.loads(json.dumps({k: spec[k] for k in ("matrix", "parameters", "maxActive", "failFast", "array")
                                  if k in spec}))


class PortfolioDouble:
    """Workload Portfolio at the message level, over a real bare repository (see module doc)."""

    def __init__(self, engine: AsyncEngine, amqp_url: str, topology: Topology):
        # Replies leave through the outbox of the database it shares with RunsDouble (whose relay sends them).
        self.server = CommandServer("workload_portfolio", engine, amqp_url, topology)
        self.revisions: dict[str, list[str]] = {}  # action → spec text of each revision
        self.calls: list[tuple[str, str]] = []  # (kind, action or branch)
        self.refusals: list[str] = []  # codes the next PrepareBranch commands are refused with

        @self.server.command(wp.PrepareBranch)
        async def prepare_branch(session, cmd: wp.PrepareBranch) -> wp.PrepareBranchReply:
            self.calls.append(("branch", cmd.branch))
            if self.refusals:
                raise Rejected(self.refusals.pop(0), "refused by the test")
            commit, actions = self._read(cmd.repository_url, cmd.branch)
            return wp.PrepareBranchReply(
                actions=[
                    wp.PreparedAction(
                        **self._prepare(name, spec, commit),
                        needs=list(spec.get("needs") or []),
                        when=spec.get("when", ""),
                        collection=collection_shape(_collection_fields(spec)),
                    )
                    for name, spec in actions.items()
                ],
                commit=commit,
            )

        @self.server.command(wp.PrepareAction)
        async def prepare_action(session, cmd: wp.PrepareAction) -> wp.PrepareActionReply:
            self.calls.append(("action", cmd.action))
            commit, actions = self._read(cmd.repository_url, cmd.branch)
            if cmd.action not in actions:
                raise Rejected("action-not-found", f"no action {cmd.action} at {commit}")
            return wp.PrepareActionReply(**self._prepare(cmd.action, actions[cmd.action], commit))

    def _read(self, url: str, branch: str) -> tuple[str, dict]:
        try:
            commit = git("--git-dir", url, "rev-parse", f"refs/heads/{branch}")
        except subprocess.CalledProcessError:
            raise Rejected("branch-not-found", f"no branch {branch}") from None
        text = git("--git-dir", url, "show", f"{commit}:actions.yaml")
        data = YAML(typ="rt").load(text)
        return commit, dict(data["actions"])

    def _prepare(self, name: str, spec, commit: str) -> dict:
        canonical = json.dumps(json.loads(json.dumps(spec)), sort_keys=True)
        history = self.revisions.setdefault(name, [])
        created = not history or history[-1] != canonical
        if created:
            history.append(canonical)
        family, environment, kind = TYPES[spec["type"]]
        return {
            "action": name,
            "workload_id": f"w-{name}",
            "revision": len(history),
            "commit": commit,
            "family": family,
            "environment": environment,
            "action_type": spec["type"],
            "service_kind": kind,
            "spec_digest": "sha256:" + "0" * 64,
            "created": created,
        }


@dataclass
class RunsDouble:
    """Execution Core at the message level (see module doc)."""

    engine: AsyncEngine
    amqp_url: str
    topology: Topology
    launches: list[ec.LaunchRun] = field(default_factory=list)
    cancels: list[ec.CancelRun] = field(default_factory=list)
    runs: dict[str, ec.Run] = field(default_factory=dict)
    cancel_ends_run: bool = True

    def __post_init__(self) -> None:
        self.outbox = Outbox(self.topology)
        self.sessions = session_factory(self.engine)
        self.server = CommandServer("execution_core", self.engine, self.amqp_url, self.topology)
        self.relay = OutboxRelay(self.engine, self.amqp_url, self.topology, owner="ec-double", poll_seconds=0.05)
        self.by_key: dict[str, str] = {}

        @self.server.command(ec.LaunchRun)
        async def launch(session, cmd: ec.LaunchRun) -> ec.LaunchRunReply:
            self.launches.append(cmd)
            if cmd.launch_key in self.by_key:  # as Execution Core: the Run already launched for the key
                run = self.runs[self.by_key[cmd.launch_key]]
                return ec.LaunchRunReply(run_id=run.run_id, phase=run.phase, version=run.version)
            run_id = str(uuid.uuid4())
            self.by_key[cmd.launch_key] = run_id
            self.runs[run_id] = ec.Run(
                run_id=run_id,
                project=cmd.metadata.project,
                workload_id=cmd.workload_id,
                revision=cmd.revision,
                phase="accepted",
                desired_state="run",
                launch_command_id=cmd.metadata.command_id,
                launch_key=cmd.launch_key,
                labels=dict(cmd.labels),
                version=1,
            )
            return ec.LaunchRunReply(run_id=run_id, phase="accepted", version=1)

        @self.server.command(ec.CancelRun)
        async def cancel(session, cmd: ec.CancelRun) -> ec.CancelRunReply:
            self.cancels.append(cmd)
            run = self.runs.get(cmd.run_id)
            if run is None:
                raise Rejected("not-found", f"no Run {cmd.run_id}")
            if run.outcome:
                return ec.CancelRunReply(run_id=run.run_id, cancel_recorded=False, phase="terminal", outcome=run.outcome)
            run.desired_state = "cancel"
            if self.cancel_ends_run:
                await self._complete(session, run, "cancelled", "cancelled-by-member", "")
            return ec.CancelRunReply(run_id=run.run_id, cancel_recorded=True, desired_state="cancel", phase=run.phase)

        @self.server.query(ec.GetRun)
        async def get(session, q: ec.GetRun) -> ec.Run:
            run = self.runs.get(q.run_id)
            if run is None:
                raise Rejected("not-found", f"no Run {q.run_id}")
            return run

    async def _complete(self, session, run: ec.Run, outcome: str, reason: str, output_commit: str) -> None:
        run.phase, run.outcome, run.reason_code, run.output_commit = "terminal", outcome, reason, output_commit
        await self.outbox.publish_event(session, self.completed(run), aggregate_id=f"run:{run.run_id}")

    @staticmethod
    def completed(run: ec.Run) -> ec.RunCompleted:
        return ec.RunCompleted(
            run_id=run.run_id,
            project=run.project,
            outcome=run.outcome,
            reason_code=run.reason_code,
            output_commit=run.output_commit,
            launch_command_id=run.launch_command_id,
            launch_key=run.launch_key,
            labels=dict(run.labels),
            workload_id=run.workload_id,
            revision=run.revision,
            attempts=1,
            array_start=run.array_start,
        )

    async def complete(self, run_id: str, outcome: str = "succeeded", reason: str = "", output_commit: str = "") -> None:
        """End a Run: commit its RunCompleted to the outbox (the relay publishes it)."""
        async with self.sessions() as session, session.begin():
            await self._complete(session, self.runs[run_id], outcome, reason, output_commit)

    async def republish(self, run_id: str) -> None:
        """Publish the Run's RunCompleted once more, as a new message (a duplicate from the owner)."""
        async with self.sessions() as session, session.begin():
            await self.outbox.publish_event(session, self.completed(self.runs[run_id]), aggregate_id=f"run:{run_id}")

    def end_silently(self, run_id: str, outcome: str, output_commit: str = "") -> None:
        """The Run ends but its RunCompleted is lost: only GetRun shows the end."""
        run = self.runs[run_id]
        run.phase, run.outcome, run.output_commit = "terminal", outcome, output_commit

    def serve_ready(self, run_id: str, endpoint: str) -> None:
        """A service Run becomes healthy with an endpoint (what GetRun then shows)."""
        run = self.runs[run_id]
        run.phase, run.observation_phase, run.observation_confidence, run.endpoint = (
            "running", "running", "current", endpoint,
        )

    @staticmethod
    def _of(labels, step: int, pipeline_id: str | None) -> bool:
        return labels.get("pipeline_step") == str(step) and pipeline_id in (None, labels.get("pipeline_id"))

    def launch_for(self, step: int, pipeline_id: str | None = None) -> ec.LaunchRun | None:
        return next((c for c in self.launches if self._of(c.labels, step, pipeline_id)), None)

    def run_for(self, step: int, pipeline_id: str | None = None) -> ec.Run | None:
        return next((r for r in self.runs.values() if self._of(r.labels, step, pipeline_id)), None)

    def assert_one_launch_per_step(self) -> None:
        """Each launch key was launched with one command_id, and each key made one Run."""
        ids: dict[str, set[str]] = {}
        for c in self.launches:
            ids.setdefault(c.launch_key, set()).add(c.metadata.command_id)
        assert all(len(v) == 1 for v in ids.values()), f"a step was launched under two identities: {ids}"
        keys = [r.launch_key for r in self.runs.values()]
        assert len(keys) == len(set(keys)), "a step got two Runs"

    async def start(self) -> None:
        await self.relay.start()
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
        await self.relay.stop()


# ---------------------------------------------------------------- the harness


@dataclass
class Harness:
    """Pipeline Coordination (server, consumer, relay) + coordinators + doubles + a client."""

    engine: AsyncEngine
    amqp_url: str
    topology: Topology
    portfolio: PortfolioDouble
    runs: RunsDouble
    repo: Repo
    client: RequestClient
    service: PipelineCoordination
    coordinators: list[PipelineCoordination] = field(default_factory=list)

    def coordinator(self, fault: FaultHook = no_fault, settings: Settings = FAST) -> PipelineCoordination:
        """A coordinator-only process (started by the caller)."""
        part = PipelineCoordination(
            engine=self.engine,
            amqp_url=self.amqp_url,
            topology=self.topology,
            authority=self.service.authority,
            settings=settings,
            parts=frozenset({"coordinator"}),
            fault=fault,
        )
        self.coordinators.append(part)
        return part

    async def start_pipeline(
        self, member: str = "m-alice", actions: tuple[str, ...] = (), command_id: str | None = None,
        branch: str = "main", max_active: int = 0,
    ):
        return await self.client.request(
            pb.StartPipeline(
                metadata=common_pb2.CommandMetadata(command_id=command_id or str(uuid.uuid4()), acting_member=member, project="demo"),
                repository_url=self.repo.url,
                branch=branch,
                actions=list(actions),
                max_active=max_active,
            )
        )

    async def rerun_pipeline(self, pipeline_id: str, *, failed_only: bool, member: str = "m-alice", command_id: str | None = None):
        return await self.client.request(
            pb.RerunPipeline(
                metadata=common_pb2.CommandMetadata(command_id=command_id or str(uuid.uuid4()), acting_member=member, project="demo"),
                pipeline_id=pipeline_id,
                failed_only=failed_only,
            )
        )

    async def stop_pipeline(self, pipeline_id: str, member: str = "m-alice", reason: str = "enough"):
        return await self.client.request(
            pb.StopPipeline(
                metadata=common_pb2.CommandMetadata(command_id=str(uuid.uuid4()), acting_member=member, project="demo"),
                pipeline_id=pipeline_id,
                reason=reason,
            )
        )

    async def get(self, pipeline_id: str, member: str = "m-alice") -> pb.Pipeline:
        return await self.client.request(
            pb.GetPipeline(metadata=common_pb2.QueryMetadata(acting_member=member, project="demo"), pipeline_id=pipeline_id)
        )

    async def load(self, pipeline_id: str) -> Pipeline:
        async with session_factory(self.engine)() as session:
            found = await SqlPipelineStore().load(session, pipeline_id)
        assert found is not None
        return found[0]

    async def until(self, check: Callable[[], Awaitable[bool] | bool], timeout: float = 30.0) -> None:
        """Wait until ``check()`` is true (fails the test after ``timeout`` seconds)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("condition not reached in time")
            await asyncio.sleep(0.05)

    async def until_state(self, pipeline_id: str, *states: str) -> Pipeline:
        async def reached() -> bool:
            return (await self.load(pipeline_id)).state in states

        await self.until(reached)
        return await self.load(pipeline_id)

    async def until_step(self, pipeline_id: str, index: int, *states: str) -> Pipeline:
        async def reached() -> bool:
            p = await self.load(pipeline_id)
            return len(p.steps) >= index and p.step(index).state in states

        await self.until(reached)
        return await self.load(pipeline_id)

    async def completed_events(self, pipeline_id: str) -> list[pb.PipelineCompleted]:
        """PipelineCompleted messages this Pipeline committed to the outbox."""
        messages = TABLES["outbox_messages"]
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(messages.c.body).where(messages.c.type == pb.PipelineCompleted.DESCRIPTOR.full_name)
            )
            events = [pb.PipelineCompleted.FromString(r.body) for r in rows]
        return [e for e in events if e.pipeline_id == pipeline_id]

    async def inbox_count(self) -> int:
        receipts = TABLES["inbox_receipts"]
        async with self.engine.connect() as conn:
            return (await conn.execute(select(func.count()).select_from(receipts))).scalar_one()


async def build(make_database, amqp_url: str, topology: Topology, base: Path, actions_yaml: str = ACTIONS) -> Harness:
    """Start everything but the coordinator (tests start one or several). Pipeline
    Coordination connects as its own principal (``Harness.amqp_url``), the client as
    the Go API's, the doubles as the harness (``amqp_url``; tests/bus.py)."""
    url = await make_database("pipeline_coordination", MIGRATIONS)
    engine = create_engine(url, pool_size=5)
    doubles_engine = await messaging_database(make_database, "pc_doubles")
    own_url = role_url("pipeline_coordination")
    service = PipelineCoordination(
        engine=engine,
        amqp_url=own_url,
        topology=topology,
        authority=GovernanceAuthority(GovernanceFile(GOVERNANCE)),
        settings=FAST,
        parts=frozenset({"relay", "server", "consumer"}),
        relay_poll_seconds=0.05,
    )
    portfolio = PortfolioDouble(doubles_engine, amqp_url, topology)
    runs = RunsDouble(doubles_engine, amqp_url, topology)
    client = RequestClient(role_url("go_api"), topology)
    repo = Repo.create(base, actions_yaml)
    await service.start()
    await portfolio.server.start()
    await runs.start()
    await client.start()
    h = Harness(engine, own_url, topology, portfolio, runs, repo, client, service)
    h._extra_engines = (doubles_engine,)  # type: ignore[attr-defined]
    return h


async def teardown(h: Harness) -> None:
    for c in h.coordinators:
        await c.stop()
    await h.client.close()
    await h.runs.stop()
    await h.portfolio.server.stop()
    await h.service.stop()
    for e in (h.engine, *h._extra_engines):  # type: ignore[attr-defined]
        await e.dispose()
