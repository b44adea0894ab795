"""Preparing repository actions as Workload revisions (seed 004, 2D).

Two phases, so that no git call happens inside a database transaction (DESIGN.md,
Persistence):

1. :meth:`Preparation.read` — outside any transaction: check current Project
   access, read actions.yaml at the exact commit (the branch's tip when a branch
   is named) and parse it completely.
2. :func:`save_revisions` — inside the command's transaction: for each action,
   create, reuse (same digest) or revise its one Workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from metallo.environment_policy import EnvironmentPolicy
from metallo.repository_policy import RepositoryPolicy
from workload_portfolio.application.actions_file import (
    ACTIONS_FILE,
    MAX_BYTES,
    ActionsFile,
    ActionsFileError,
    parse_actions_file,
)
from workload_portfolio.application.ports import ProjectAuthority, SourceControl, WorkloadStore
from workload_portfolio.domain.action_types import action_type
from workload_portfolio.domain.errors import (
    ActionNotFound,
    ActionsInvalid,
    InvalidArgument,
    SourceError,
)
from workload_portfolio.domain.refs import COMMIT, branch_problem
from workload_portfolio.domain.specification import canonical_json, normalise, spec_digest
from workload_portfolio.domain.workload import Revision, WorkloadKey, decide

#: Capabilities that allow preparing actions: its own, and the two operations that
#: prepare on the member's behalf (launching a Run, starting a Pipeline).
PREPARE_CAPABILITIES = ("workloads.prepare", "runs.launch", "pipelines.start")
#: Capabilities that allow reading Workloads.
READ_CAPABILITIES = ("workloads.read", "runs.read")

MAX_PROBLEMS_IN_DETAILS = 500


@dataclass(frozen=True)
class SourceRead:
    """actions.yaml as read at one exact commit, already validated."""

    repository_url: str
    branch: str
    commit: str
    actions: ActionsFile


@dataclass(frozen=True)
class PreparedRevision:
    """The outcome for one action: its revision and whether this call created it."""

    revision: Revision
    created: bool


class Preparation:
    """Phase 1 of a preparation: permission, source read and parsing (no database)."""

    def __init__(self, source: SourceControl, authority: ProjectAuthority,
                 environment: EnvironmentPolicy | None = None,
                 repositories: RepositoryPolicy | None = None):
        """``environment``: names actions may not set (default: :class:`EnvironmentPolicy`);
        ``repositories``: which input repository URLs actions may name (the same policy
        the source reads under; None: unchecked)."""
        self.source = source
        self.authority = authority
        self.environment = environment or EnvironmentPolicy()
        self.repositories = repositories

    def check_prepare(self, project: str, member: str) -> None:
        """Raise PermissionDenied/GovernanceUnavailable unless ``member`` may prepare in ``project``."""
        if not project or not member:
            raise InvalidArgument("metadata.project and metadata.acting_member are required")
        self.authority.check(project, member, PREPARE_CAPABILITIES)

    async def read(self, *, project: str, member: str, repository_url: str,
                   branch: str, commit: str) -> SourceRead:
        """Check access, then read and parse actions.yaml.

        branch / commit: at least one; with commit the file is read at exactly that
        commit and branch is only recorded. Raises PermissionDenied,
        GovernanceUnavailable, InvalidArgument, SourceError (repository-not-found,
        branch-not-found, commit-not-found, file-not-found, source-unavailable) or
        ActionsInvalid (details: every problem with its line).
        """
        self.check_prepare(project, member)
        if not repository_url:
            raise InvalidArgument("repository_url is required")
        if not branch and not commit:
            raise InvalidArgument("name a branch or a commit")
        if commit and not COMMIT.match(commit):
            raise InvalidArgument(f"commit must be 40 lower-case hex digits, got {commit!r}")
        if branch and (why := branch_problem(branch)):
            raise InvalidArgument(f"branch {branch!r}: {why}")
        try:
            f = await self.source.read_file(repository_url, branch=branch or None, commit=commit or None,
                                            path=ACTIONS_FILE, max_bytes=MAX_BYTES)
        except SourceError as e:
            if e.code == "file-too-large":
                raise ActionsInvalid(f"{ACTIONS_FILE}: {e.message}") from None
            raise
        try:
            parsed = parse_actions_file(f.content, source=ACTIONS_FILE,
                                        environment=self.environment,
                                        repositories=self.repositories)
        except ActionsFileError as e:
            shown = e.problems[:MAX_PROBLEMS_IN_DETAILS]
            raise ActionsInvalid(
                f"{ACTIONS_FILE} at {f.commit} has {len(e.problems)} problem(s):\n"
                + "\n".join(str(p) for p in shown),
                details={f"problem.{i + 1:03d}": str(p) for i, p in enumerate(shown)} | {"commit": f.commit},
            ) from None
        return SourceRead(repository_url=repository_url, branch=branch, commit=f.commit, actions=parsed)


def select_actions(read: SourceRead, action: str | None) -> list[tuple[str, dict]]:
    """One named action (ActionNotFound when absent) or, with None, all in file order."""
    if action is None:
        return list(read.actions.actions)
    a = read.actions.action(action)
    if a is None:
        names = ", ".join(read.actions.names)
        raise ActionNotFound(f"no action {action!r} in {ACTIONS_FILE} at {read.commit} (actions: {names})")
    return [(action, a)]


async def save_revisions(store: WorkloadStore, read: SourceRead, actions: list[tuple[str, dict]], *,
                         project: str, member: str) -> list[PreparedRevision]:
    """Phase 2: create, reuse or revise each action's Workload (inside one transaction).

    Returns one :class:`PreparedRevision` per action, in the given order.
    """
    out: list[PreparedRevision] = []
    for name, action in actions:
        t = action_type(action["type"])
        spec = normalise(name, action, repository_url=read.repository_url, commit=read.commit)
        digest = spec_digest(spec)
        workload_id, latest = await store.lock_workload(
            WorkloadKey(project, read.repository_url, name),
            action_type=t.name, family=t.family, environment=t.environment, service_kind=t.service_kind,
        )
        match = await store.revision_with_digest(workload_id, digest) if latest else None
        decision, number = decide(latest, match.revision if match else None)
        if decision == "reuse":
            assert match is not None
            out.append(PreparedRevision(match, created=False))
            continue
        saved = await store.add_revision(Revision(
            workload_id=workload_id, project=project, repository_url=read.repository_url, action=name,
            revision=number, action_type=t.name, family=t.family, environment=t.environment,
            service_kind=t.service_kind, commit=read.commit, branch=read.branch,
            spec_json=canonical_json(spec), spec_digest=digest, created_by=member,
            created_at=datetime.now(UTC),
        ))
        out.append(PreparedRevision(saved, created=True))
    return out
