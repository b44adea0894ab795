"""Ports of Execution Core (seed 004 §3A–3D, Run access; DESIGN.md, External owners).

- :class:`ProjectAuthority` — current Project permissions, provisioned Sites and
  limits, member account bindings (Beto/Waldur; development adaptor: the
  governance file).
- :class:`WorkloadRevisions` — the exact Workload revision (Workload Portfolio's
  ``GetWorkloadRevision`` query).
- :class:`RunStore` — Execution Core's own PostgreSQL rows.
- :class:`MessageOutbox` — events and Site commands written in the caller's
  transaction (the transactional outbox).
- :class:`LogReadStore` — private Run log reads (seed 001, Private Run log commands).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from google.protobuf.message import Message
from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.domain.planning import Binding, RevisionFacts, SiteFacts
from metallo.persistence.leases import Claim


class AuthorityUnavailable(Exception):
    """The Project authority cannot answer now (e.g. an invalid governance file); retry later."""


class RevisionNotFound(Exception):
    """Workload Portfolio definitely has no such revision for this Project (a definite answer)."""


class RevisionUnavailable(Exception):
    """Workload Portfolio did not answer in time or refused for a temporary reason; retry later."""


class ProjectAuthority(Protocol):
    """Current answers of the Project authority. Every call reads the current state.

    Methods raise :class:`AuthorityUnavailable` when no trustworthy answer exists.
    """

    def has_capability(self, project: str, member: str, capability: str) -> bool:
        """Whether ``member`` holds ``capability`` (e.g. ``runs.launch``) in ``project`` now."""
        ...

    def project_exists(self, project: str) -> bool:
        """Whether the Project is known."""
        ...

    def is_member(self, project: str, member: str) -> bool:
        """Whether ``member`` belongs to ``project`` now (False for an unknown Project)."""
        ...

    def project_run_limit(self, project: str) -> int | None:
        """The Project's concurrent-Run limit (None = unlimited)."""
        ...

    def sites_for(self, project: str) -> list[SiteFacts]:
        """The Project's provisioned Sites with readiness and limits."""
        ...

    def binding(self, member: str, site_id: str) -> Binding | None:
        """The member's account binding at the Site, or None."""
        ...


class WorkloadRevisions(Protocol):
    """Reads exact Workload revisions from their owner."""

    async def get(
        self, project: str, member: str, workload_id: str, revision: int
    ) -> RevisionFacts:
        """Return the revision; raise RevisionNotFound or RevisionUnavailable."""
        ...


class MessageOutbox(Protocol):
    """Writes outgoing messages into the caller's transaction (metallo.messaging.Outbox)."""

    async def publish_event(
        self, session: AsyncSession, message: Message, *, aggregate_id: str
    ) -> Any:
        """Add ``message`` as an event to the caller's transaction, keyed by ``aggregate_id``.

        It is relayed to the events exchange only after that transaction commits (the
        transactional outbox); returns the outbox message id.
        """
        ...

    async def send_command(
        self, session: AsyncSession, message: Message, *, aggregate_id: str
    ) -> Any:
        """Add ``message`` as a command to the caller's transaction, keyed by ``aggregate_id``.

        Routed to its owner's command queue after commit, like :meth:`publish_event`;
        returns the outbox message id.
        """
        ...


Row = dict[str, Any]


class RunStore(Protocol):
    """Execution Core's rows. Every method runs in the caller's transaction."""

    async def now(self, session: AsyncSession) -> datetime:
        """PostgreSQL's ``now()`` — the only clock used for leases and deadlines."""
        ...

    async def insert_run(self, session: AsyncSession, values: Row) -> None:
        """Insert one ``runs`` row from ``values`` (column name -> value)."""
        ...

    async def find_run(
        self, session: AsyncSession, run_id: str, *, for_update: bool = False
    ) -> Row | None:
        """The Run row as a dict, or None; ``for_update`` locks it (``FOR UPDATE``)."""
        ...

    async def find_run_at(
        self, session: AsyncSession, run_id: str
    ) -> tuple[Row | None, datetime | None]:
        """The Run row and the transaction's ``now()`` in one read; (None, None) when absent."""
        ...

    async def wake_run(self, session: AsyncSession, run_id: str) -> bool:
        """Make a non-terminal Run due now and bump its version (a result arrived);
        False when it is absent or terminal."""
        ...

    async def find_attempt(self, session: AsyncSession, attempt_id: str) -> Row | None:
        """One Attempt row by id, or None."""
        ...

    async def note_native_end(self, session: AsyncSession, attempt_id: str) -> str | None:
        """Record that the Site noticed the Attempt's native end (ADR 0016) on a not yet
        ended Attempt without one; its Run id, or None when absent, ended or noticed."""
        ...

    async def note_waiting(
        self, session: AsyncSession, run_id: str, attempt_id: str, command_id: str, code: str
    ) -> bool:
        """Save the Site's deferral ``code`` of the pending ``command_id`` as the Run's
        waiting reason, make it due now and bump its version — only while the Run is not
        terminal and ``attempt_id`` is its current Attempt; True when it changed."""
        ...

    async def clear_waiting(self, session: AsyncSession, run_id: str, command_id: str) -> None:
        """Clear the Run's waiting reason when it was reported for ``command_id``."""
        ...

    async def mark_attempt_lost(
        self, session: AsyncSession, attempt_id: str, actor: str
    ) -> bool:
        """Set ``lost_marked_at = now()`` and ``lost_marked_by`` on a not yet ended,
        not yet marked Attempt; True when it changed."""
        ...

    async def append_decision(self, session: AsyncSession, values: Row) -> None:
        """Append an operator's decision to the audit table ``run_decisions``."""
        ...

    async def decisions_of(self, session: AsyncSession, run_id: str) -> list[Row]:
        """The Run's audited decisions, oldest first."""
        ...

    async def find_by_launch_key(
        self, session: AsyncSession, project: str, launch_key: str
    ) -> Row | None:
        """The Project's Run with this launch key (idempotent launch replay), or None."""
        ...

    async def update_run(
        self,
        session: AsyncSession,
        run_id: str,
        expected_version: int,
        values: Row,
        *,
        claim: Claim | None = None,
        release: bool = False,
    ) -> bool:
        """Write ``values`` and bump the version when the version (and the claim) still hold."""
        ...

    async def claim_for_planning(
        self, session: AsyncSession, owner: str, lease_seconds: float, limit: int
    ) -> list[Claim]:
        """Lease up to ``limit`` accepted Runs whose wake time has come (seed 004, 3D).

        ``lease_seconds`` is measured on PostgreSQL's clock; rows leased by someone
        else and unexpired are skipped. Returns one fenced :class:`Claim` per row.
        """
        ...

    async def claim_for_supervision(
        self, session: AsyncSession, owner: str, lease_seconds: float, limit: int
    ) -> list[Claim]:
        """Lease up to ``limit`` active (planned, not terminal) Runs whose wake time has come.

        Same lease contract as :meth:`claim_for_planning` (seed 004, 4E: fenced leases).
        """
        ...

    async def release_claim(self, session: AsyncSession, claim: Claim, values: Row) -> None:
        """Free the lease (fenced) without touching the version."""
        ...

    async def count_active(self, session: AsyncSession, project: str) -> tuple[int, dict[str, int]]:
        """(active planned Runs in the Project, active Runs per Site across Projects)."""
        ...

    async def lock_admission(self, session: AsyncSession, project: str) -> None:
        """Serialise admission decisions (limits) until the transaction ends."""
        ...

    async def insert_attempt(self, session: AsyncSession, values: Row) -> None:
        """Insert one ``attempts`` row from ``values``."""
        ...

    async def update_attempt(self, session: AsyncSession, attempt_id: str, values: Row) -> None:
        """Write ``values`` to the Attempt (no version or lease check)."""
        ...

    async def attempts_of(self, session: AsyncSession, run_id: str) -> list[Row]:
        """The Run's Attempts as dicts, ordered by Attempt number."""
        ...

    async def commands_of(self, session: AsyncSession, attempt_id: str) -> list[Row]:
        """The Attempt's Site commands as dicts, in the order they were inserted."""
        ...

    async def insert_command(self, session: AsyncSession, values: Row) -> Row:
        """Insert one Site command row; return the stored row (with generated columns)."""
        ...

    async def find_command(
        self, session: AsyncSession, command_id: str, *, for_update: bool = False
    ) -> Row | None:
        """The Site command row, or None; ``for_update`` locks it."""
        ...

    async def record_result(self, session: AsyncSession, command_id: str, values: Row) -> None:
        """Record a command's result once: a command that already has an outcome is unchanged."""
        ...

    async def list_runs(
        self,
        session: AsyncSession,
        project: str,
        *,
        workload_id: str,
        phase: str,
        outcome: str,
        active_only: bool,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[Row]:
        """A page of the Project's Runs, newest first (``accepted_at``, then ``run_id``, desc).

        Empty ``workload_id``/``phase``/``outcome`` mean no filter; ``active_only``
        drops terminal Runs; ``after`` is the keyset cursor (``accepted_at``,
        ``run_id``) of the previous page's last row; at most ``limit`` rows.
        """
        ...


class LogReadStore(Protocol):
    """Private Run log reads (table ``log_reads``). Every method runs in the caller's
    transaction."""

    async def insert_read(self, session: AsyncSession, values: Row) -> None:
        """Insert one ``log_reads`` row from ``values``."""
        ...

    async def find_read(self, session: AsyncSession, read_id: str) -> Row | None:
        """The log read as a dict, or None."""
        ...

    async def find_read_by_command(
        self, session: AsyncSession, command_id: str, *, for_update: bool = False
    ) -> Row | None:
        """The read whose ``read-log`` Site command is ``command_id``."""
        ...

    async def answer_read(self, session: AsyncSession, read_id: str, values: Row) -> bool:
        """Write the Site's answer once (only a pending read changes); True when it did."""
        ...

    async def prune_reads(self, session: AsyncSession, before: datetime, *, limit: int) -> int:
        """Delete at most ``limit`` reads created before ``before`` that are no longer
        pending; return how many."""
        ...


class SiteDrainStore(Protocol):
    """Draining Sites and platform-wide counts (``adaptors.site_drain_store``).
    Every method runs in the caller's transaction."""

    async def drain(self, session: AsyncSession, site_id: str, member: str,
                    reason: str) -> tuple[dict, bool]:
        """Mark draining; (row with site_id, drained_by, reason, drained_at; already)."""
        ...

    async def resume(self, session: AsyncSession, site_id: str) -> bool:
        """Stop draining; True when the Site was draining."""
        ...

    async def drains(self, session: AsyncSession) -> list[dict]:
        """Every draining Site's row."""
        ...

    async def draining_ids(self, session: AsyncSession) -> frozenset[str]:
        """Ids of the draining Sites."""
        ...

    async def is_draining(self, session: AsyncSession, site_id: str) -> bool:
        """Whether the Site is draining."""
        ...

    async def active_runs_by_site(self, session: AsyncSession) -> dict[str, int]:
        """Runs not terminal yet per target Site."""
        ...

    async def count_active(self, session: AsyncSession, site_id: str | None = None,
                           attempt_ids: Sequence[str] | None = None) -> int:
        """Runs of the whole platform not terminal yet (accepted ones too); with
        ``site_id`` those placed on that Site, with ``attempt_ids`` those whose current
        Attempt is one of them."""
        ...

    async def wake_held(self, session: AsyncSession, site_id: str, code: str) -> int:
        """Make due now the Runs waiting with ``code`` (for this Site); how many."""
        ...


class OperatorAuthority(Protocol):
    """Platform-wide operator capabilities and governed Sites (governance port)."""

    def is_operator(self, member: str, capability: str) -> bool:
        """Whether ``member`` holds the operator ``capability`` now."""
        ...

    def site_known(self, site_id: str) -> bool:
        """Whether the governance file names the Site."""
        ...
