"""Ports of Pipeline Coordination (implemented in ``adaptors/``).

- :class:`ProjectAuthority` — current Project permissions (governance file in development).
- :class:`Portfolio` — Workload Portfolio: prepare a branch, prepare one action at a branch's head.
- :class:`Runs` — Execution Core: launch, cancel and read Runs.
- :class:`PipelineStore` — the service's own PostgreSQL rows.

Outside calls raise :class:`Refused` for a definite refusal (the same request
will be refused again) and :class:`Unavailable` when the outcome is unknown
(timeout, owner not running); the coordinator retries the latter with the same
command_id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from metallo.persistence.leases import Claim
from pipeline_coordination.domain.pipeline import Pipeline, PreparedAction, RunView


class Refused(Exception):
    """An owner refused for good, with its stable ``code``."""

    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Unavailable(Exception):
    """An owner did not answer (the request may or may not have been applied), or replied "try later".

    ``saved``: the owner replied with a temporary rejection, which it saved under
    the request's command_id; the next try needs a new command_id.
    """

    def __init__(self, message: str, *, saved: bool = False):
        super().__init__(message)
        self.saved = saved


class AuthorityUnavailable(Exception):
    """The Project authority cannot answer now (e.g. an invalid governance file)."""


class ProjectAuthority(Protocol):
    """Current Project permissions (Beto port; development: the governance file).

    Every call reads the current state: never a cached verdict (seed 004, Run access).
    """

    def allowed(self, project: str, member: str, capability: str) -> bool:
        """Whether ``member`` holds ``capability`` in ``project`` now. Raises AuthorityUnavailable."""

    def project_exists(self, project: str) -> bool:
        """Whether the authority knows ``project`` at all. Raises AuthorityUnavailable."""


@dataclass(frozen=True)
class LaunchRequest:
    """One step's launch, with its stable identity (seed 004 §8B)."""

    command_id: str
    project: str
    member: str
    workload_id: str
    revision: int
    launch_key: str
    labels: dict[str, str]
    repository_commit: str
    parameters: dict[str, str] = field(default_factory=dict)  # a collection child's values
    array_group: ArrayGroup | None = None  # a collection child launched with its siblings as one array


@dataclass(frozen=True)
class ArrayGroup:
    """LaunchRun's ``array_group`` of a collection child (ADR 0032)."""

    group_id: str
    size: int
    index: int  # 0..size-1
    max_active: int
    mode: str  # prefer | require


class Portfolio(Protocol):
    """Workload Portfolio's PrepareBranch and PrepareAction commands (seed 004 §8E, §8C).

    Methods raise :class:`Refused` (definite) or :class:`Unavailable` (outcome unknown).
    """

    async def prepare_branch(
        self, command_id: str, project: str, member: str, repository_url: str, branch: str
    ) -> tuple[list[PreparedAction], str]:
        """PrepareBranch: (actions in actions.yaml order, commit). Raises Refused / Unavailable."""

    async def prepare_action(
        self, command_id: str, project: str, member: str, repository_url: str, branch: str, action: str
    ) -> PreparedAction:
        """PrepareAction at the branch's current commit. Raises Refused / Unavailable."""


class Runs(Protocol):
    """Execution Core's LaunchRun, CancelRun and GetRun (seed 004 §8B).

    Methods raise :class:`Refused` (definite) or :class:`Unavailable` (outcome unknown).
    """

    async def launch(self, request: LaunchRequest) -> str:
        """LaunchRun; returns the run_id (the same one on a replay). Raises Refused / Unavailable."""

    async def cancel(self, command_id: str, project: str, member: str, run_id: str, reason: str) -> tuple[str, str]:
        """CancelRun; returns (outcome, reason_code) when the Run had already ended, else ("", "")."""

    async def get(self, project: str, member: str, run_id: str) -> RunView:
        """GetRun reduced to a :class:`RunView`. Raises Refused / Unavailable."""


@dataclass(frozen=True)
class Meta:
    """Bookkeeping of a stored Pipeline that is not part of the domain value."""

    seq: int
    version: int
    wake_seq: int
    start_command_id: str
    created_at: datetime
    updated_at: datetime


class PipelineStore(Protocol):
    """The service's PostgreSQL rows of Pipelines and steps, in the caller's transaction.

    Writers lock the Pipeline row (``load(lock=True)``), reload and save, so the row
    lock orders them; leases are fenced (seed 004 §8B; DESIGN.md, Persistence).
    """

    async def insert(self, session: AsyncSession, p: Pipeline, start_command_id: str) -> None:
        """Insert the Pipeline and its steps, recording ``start_command_id`` (the StartPipeline)."""
        ...

    async def load(self, session: AsyncSession, pipeline_id: str, *, lock: bool = False) -> tuple[Pipeline, Meta] | None:
        """The Pipeline and its :class:`Meta`, or None; ``lock`` takes the row lock."""
        ...

    async def save(self, session: AsyncSession, old: Pipeline, new: Pipeline) -> None:
        """Write what changed from ``old`` to ``new`` and bump the version (row lock held)."""
        ...

    async def wake(self, session: AsyncSession, pipeline_id: str) -> None:
        """Mark the Pipeline active and due now, and bump ``wake_seq`` (an event or a stop)."""
        ...

    async def now(self, session: AsyncSession) -> datetime:
        """PostgreSQL's ``now()``: the only clock the coordinator uses."""
        ...

    async def claim(self, session: AsyncSession, owner: str, lease_seconds: float, limit: int) -> list[Claim]:
        """Lease up to ``limit`` active Pipelines that are due, for ``lease_seconds`` (DB clock).

        Returns one fenced :class:`Claim` per row; rows leased by others are skipped.
        """
        ...

    async def hold(self, session: AsyncSession, claim: Claim, lease_seconds: float) -> None:
        """Lock the claimed row and renew the lease; raises LeaseLost when it is no longer ours."""

    async def release(
        self, session: AsyncSession, claim: Claim, *, seen_wake_seq: int, active: bool, wake_in: float | None
    ) -> None:
        """Free the lease and set the next wake: ``wake_in`` seconds from now, or never.

        A wake after ``seen_wake_seq`` keeps the Pipeline active and due now. Raises
        :class:`LeaseLost` when the lease is no longer held.
        """
        ...

    async def find_collection(self, session: AsyncSession, collection_id: str) -> tuple[str, int] | None:
        """(pipeline_id, step_index) of the collection, or None."""
        ...

    async def page_collections(
        self, session: AsyncSession, project: str, pipeline_id: str, after: tuple[int, int] | None, limit: int
    ) -> list[tuple[str, int, int]]:
        """(pipeline_id, step_index, pipeline seq) of the Project's collections, newest Pipeline first,
        after the (seq, step_index) ``after``; only ``pipeline_id``'s when set."""
        ...

    async def page(
        self, session: AsyncSession, project: str, state: str, before_seq: int | None, limit: int
    ) -> list[tuple[Pipeline, Meta]]:
        """The Project's Pipelines, newest first (``seq`` descending), at most ``limit``.

        An empty ``state`` means any state; ``before_seq`` is the previous page's last ``seq``.
        """
        ...
