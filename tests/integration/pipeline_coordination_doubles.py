"""Pipeline Coordination's neighbours at the message level, for its integration tests.

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

import json
import subprocess
import uuid
from dataclasses import dataclass, field

from ruamel.yaml import YAML
from sqlalchemy.ext.asyncio import AsyncEngine

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import CommandServer, Outbox, OutboxRelay, Rejected, Topology
from metallo.messaging.schema import TABLES
from metallo.persistence.engine import create_engine, session_factory
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from tests.integration.pipeline_coordination_repo import git
from workload_portfolio.adaptors.command_handlers import collection_shape

TYPES = {
    "slurm-job": ("queued-batch", "slurm", ""),
    "k8s-job": ("queued-batch", "k8s", ""),
    "k8s-deployment": ("reconciled-service", "k8s", "application"),
    "k8s-inferenceservice": ("reconciled-service", "k8s", "huggingface-inference"),
}




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
