"""Ports of the Workload Portfolio (DESIGN.md, "External owners are ports").

- :class:`SourceControl` — read actions.yaml at an exact commit (GitLab, a lab
  Git server, a local repository).
- :class:`ProjectAuthority` — current Project access (Beto; development adapter:
  the governance file).
- :class:`WorkloadStore` — Workloads and revisions in the service's database,
  used inside the transaction the command server opens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from workload_portfolio.domain.workload import Revision, WorkloadKey, WorkloadSummary


@dataclass(frozen=True)
class SourceFile:
    """A file read at an exact commit.

    commit: the 40-hex commit it was read from (the branch's tip when a branch was
    named); content: the file's bytes (at most the adapter's size bound).
    """

    repository_url: str
    commit: str
    path: str
    content: bytes


@dataclass(frozen=True)
class BranchList:
    """A repository's branches: ``branches`` as (name, 40-hex tip) sorted by name, at
    most the adapter's bound (``truncated`` when there were more); ``default_branch``
    the branch HEAD names, or "" when the server does not say."""

    branches: tuple[tuple[str, str], ...]
    default_branch: str
    truncated: bool


class SourceControl(Protocol):
    """Reads repository files at exact commits, and a repository's branches.

    Raises :class:`workload_portfolio.domain.errors.SourceError` with code
    repository-not-found, branch-not-found, commit-not-found, file-not-found,
    file-too-large or source-unavailable (timeouts, network, unexpected git failure).
    """

    async def read_file(
        self, repository_url: str, *, branch: str | None, commit: str | None, path: str, max_bytes: int
    ) -> SourceFile:
        """Read ``path`` at ``commit``, or at the tip of ``branch`` when no commit is given."""
        ...

    async def list_branches(self, repository_url: str) -> BranchList:
        """The repository's branches (repository-not-found, source-unavailable)."""
        ...


class ProjectAuthority(Protocol):
    """Current Project access, asked at decision time (seed 004, "Run access with current Project permissions")."""

    def check(self, project: str, member: str, any_of: tuple[str, ...]) -> None:
        """Return when ``member`` holds at least one capability of ``any_of`` in ``project``.

        Raises PermissionDenied, or GovernanceUnavailable when the authority cannot answer.
        """
        ...


class WorkloadStore(Protocol):
    """Persistence of Workloads and revisions (one open transaction per call site)."""

    async def lock_workload(self, key: WorkloadKey, *, action_type: str, family: str,
                            environment: str, service_kind: str | None) -> tuple[str, int | None]:
        """Create the Workload row if missing and lock it for this transaction.

        Returns (workload_id, latest revision or None when it has none yet).
        Concurrent callers for the same key serialise here.
        """
        ...

    async def revision_with_digest(self, workload_id: str, spec_digest: str) -> Revision | None:
        """The revision of this Workload whose spec digest matches, or None."""
        ...

    async def add_revision(self, revision: Revision) -> Revision:
        """Insert a new immutable revision and move the Workload's latest pointer.

        Returns the revision as stored (created_at from the database clock).
        """
        ...

    async def get_revision(self, workload_id: str, revision: int) -> Revision | None:
        """A revision (``revision`` 0 = the latest), or None."""
        ...

    async def list_workloads(self, project: str, *, after: int, limit: int,
                             repository_url: str | None) -> tuple[list[WorkloadSummary], int | None]:
        """A page of the Project's Workloads in creation order after cursor ``after``.

        Returns (workloads, next cursor or None on the last page).
        """
        ...
