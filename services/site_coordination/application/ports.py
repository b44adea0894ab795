"""Ports of Site Coordination (DESIGN.md: application defines, adaptors implement).

Every store and publisher instance is bound to ONE open transaction: a use case's
writes and the events it publishes commit together or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from site_coordination.domain.authorisation import AttemptState, AuthorityFacts
from site_coordination.domain.grants import CommandGrant
from site_coordination.domain.streams import NewCommand, StoredCommand, StreamKey


class AuthorityUnavailable(Exception):
    """The Project authority cannot answer now (e.g. an invalid governance file)."""


class IdentityProviderUnavailable(Exception):
    """The member-token issuer cannot sign now."""


@dataclass(frozen=True)
class RepositoryGrantRecord:
    """A Run-scoped repository grant as stored (never its token)."""

    grant_id: str
    stream: StreamKey
    run_id: str
    attempt_id: str
    direction: str
    repository_url: str
    username: str
    provider_ref: str
    expires_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class IssuedCredential:
    """A repository credential from Source Control; ``token`` is shown once."""

    username: str
    token: str
    provider_ref: str


class SiteStore(Protocol):
    """Site Coordination's private database, inside one transaction."""

    async def now(self) -> datetime:
        """PostgreSQL's ``now()``: the only clock for grant, permit and deadline checks."""
        ...
    async def get_command(self, command_id: str) -> StoredCommand | None:
        """The stored command with this id (any stream), or None."""
        ...
    async def append_command(self, command: NewCommand, request_hash: str) -> StoredCommand:
        """Insert with the stream's next sequence (gapless, safe under concurrency)."""
        ...
    async def add_array_tasks(self, command_id: str, attempt_ids: list[str]) -> None:
        """Record the Attempts a ``start-array`` command submits (one row each)."""
        ...
    async def deliver_next(self, stream: StreamKey) -> StoredCommand | None:
        """Mark the command after the acknowledged one delivered and return it (or None)."""
        ...
    async def command_for_result(self, command_id: str) -> tuple[StoredCommand, int] | None:
        """The command and its stream's acknowledged sequence, with the stream row locked
        for this transaction (results of one stream are decided one at a time)."""
        ...
    async def grant_and_deliver_next(
        self, secret_sha256: str,
    ) -> tuple[CommandGrant | None, datetime, StoredCommand | None]:
        """In one read: the grant with this secret hash (or None), the database's now,
        and — only when the grant is usable at that now — the next command of its
        stream, marked delivered (None when the stream has none)."""
        ...
    async def grant_and_command_for_result(
        self, secret_sha256: str, command_id: str,
    ) -> tuple[CommandGrant | None, datetime, tuple[StoredCommand, int] | None]:
        """In one read: the grant (or None), the database's now, and what
        :meth:`command_for_result` returns (stream row locked for this transaction)."""
        ...
    async def save_result(self, command: StoredCommand, result_json: str, *,
                          deliver_next: bool = False) -> StoredCommand | None:
        """Save the result, advance the stream's acknowledgement to its sequence and wake
        the stream's long-polls at commit. With ``deliver_next``, also hand out the
        command after it (as :meth:`deliver_next`) and return it (None when none)."""
        ...
    async def add_progress(self, command_id: str, code: str) -> bool:
        """Record (command, code) once; True when new."""
        ...
    async def attempt_run_in_stream(self, stream: StreamKey, attempt_id: str) -> str | None:
        """The ``run_id`` of a command of ``stream`` naming ``attempt_id`` (the first by
        sequence), or None when no command of that stream names the Attempt."""
        ...
    async def add_native_end_notice(self, stream: StreamKey, run_id: str,
                                    attempt_id: str) -> bool:
        """Record the Attempt's native end notice once; True when new (ADR 0016)."""
        ...
    async def notify(self, stream: StreamKey) -> None:
        """Wake long-polls of ``stream`` once this transaction commits."""
        ...
    async def attempt(self, attempt_id: str) -> tuple[StreamKey, AttemptState] | None:
        """The Attempt's stream and :class:`AttemptState`, or None when no ``prepare``/
        ``apply`` (material) command of it is stored (seed 004 §4B: decisions use the
        saved material).
        """
        ...
    async def insert_grant(self, grant: CommandGrant, secret_sha256: str) -> None:
        """Store a Runtime command grant with only the SHA-256 hex of its secret."""
        ...
    async def grant_by_hash(self, secret_sha256: str) -> tuple[CommandGrant | None, datetime]:
        """The grant with this secret hash (or None) and the database's now, in one read."""
        ...
    async def revoke_grant(self, grant_id: str) -> bool:
        """Revoke the grant now; True when it was unrevoked (False: unknown or revoked)."""
        ...
    async def list_grants(self) -> list[CommandGrant]:
        """Every command grant, revoked and expired included, newest first."""
        ...
    async def insert_repository_grant(self, record: RepositoryGrantRecord,
                                      issued_by: str) -> None:
        """Store a Run-scoped repository grant (never its token) issued under ``issued_by``."""
        ...
    async def repository_grant(self, grant_id: str) -> RepositoryGrantRecord | None:
        """The repository grant with this id, revoked or not, or None."""
        ...
    async def revoke_repository_grant(self, grant_id: str) -> None:
        """Mark the repository grant revoked now (idempotent; no-op when unknown)."""
        ...
    async def insert_read_permit(self, permit: dict[str, Any]) -> None:
        """Store a read permit: the ``read_permits`` columns (seed 001, Private reads)."""
        ...
    async def read_permit(self, permit_id: str) -> dict[str, Any] | None:
        """The stored permit (with ``site_id``, ``environment`` and ``live``: unexpired
        on the database clock), or None."""
        ...


class RunEnds(Protocol):
    """Runs Execution Core said ended (``RunCompleted``) and Attempts known to have
    ended, inside one transaction."""

    async def record_run_end(self, run_id: str, outcome: str) -> bool:
        """Record the Run's end once; True when new."""
        ...
    async def run_ended(self, run_id: str) -> bool:
        """Whether the Run's end is recorded."""
        ...
    async def outstanding_grants(self, run_id: str) -> list[tuple[str, str]]:
        """``(grant_id, provider_ref)`` of the Run's unrevoked repository grants,
        locked for this transaction."""
        ...
    async def record_attempt_end(self, attempt_id: str, run_id: str, reason: str) -> bool:
        """Record the Attempt's end once (``reason``: result | superseded); True when new."""
        ...
    async def attempt_ended(self, attempt_id: str) -> bool:
        """Whether the Attempt's end is recorded."""
        ...
    async def earlier_open_attempts(self, run_id: str, attempt_number: int) -> list[str]:
        """Attempts of the Run numbered below ``attempt_number`` whose end is not recorded."""
        ...
    async def outstanding_attempt_grants(self, attempt_id: str) -> list[tuple[str, str]]:
        """As :meth:`outstanding_grants`, for one Attempt."""
        ...


class EventPublisher(Protocol):
    """Publishes integration events through the outbox of the current transaction."""

    async def publish(self, event: Any, aggregate_id: str) -> None:
        """Queue ``event`` (a protobuf message) in the current transaction's outbox.

        It is relayed only after that transaction commits, keyed by ``aggregate_id``.
        """
        ...


class ProjectAuthority(Protocol):
    """Current Project authority and member account bindings (Beto/Waldur port)."""

    def facts(self, project_id: str, member_id: str, site_id: str) -> AuthorityFacts:
        """Raise :class:`AuthorityUnavailable` when the authority cannot answer."""
        ...


class OperatorAuthority(Protocol):
    """Who operates the platform, and which Sites are governed (governance port)."""

    def is_operator(self, member_id: str, capability: str) -> bool:
        """Whether the member holds the operator ``capability`` now; raise
        :class:`AuthorityUnavailable` when the authority cannot answer."""
        ...

    def site_environment(self, site_id: str) -> str | None:
        """The governed Site's environment (``slurm``/``k8s``), None when not governed;
        raise :class:`AuthorityUnavailable` when the authority cannot answer."""
        ...

    def may_read_audit(self, project: str, member_id: str) -> bool:
        """Whether the member may read the Project's audit ("" = platform-wide) now;
        raise :class:`AuthorityUnavailable` when the authority cannot answer."""
        ...


class SourceControl(Protocol):
    """Repository credentials (GitLab port); bound to the current transaction."""

    async def issue(self, repository_url: str, direction: str, grant_id: str,
                    expires_at: datetime) -> IssuedCredential:
        """Issue a credential for ``repository_url``, valid until ``expires_at``.

        Seed 001, Repository grants: ``direction`` ``stage-in`` may fetch only,
        ``stage-out`` may fetch and push. Raises
        :class:`~site_coordination.domain.errors.Conflict` for a repository it does not serve.
        """
        ...
    async def revoke(self, provider_ref: str) -> None:
        """Revoke the credential named by ``provider_ref`` (idempotent)."""
        ...


class MemberTokenIssuer(Protocol):
    """Per-action member tokens (Keycloak port)."""

    def issue(self, member_id: str, site_username: str, lifetime_seconds: int) -> tuple[str, datetime]:
        """Return ``(jwt, expires_at)``; raise :class:`IdentityProviderUnavailable`."""
        ...
