"""PostgreSQL implementation of :class:`SiteStore`, bound to one ``AsyncSession``
transaction (seed 004 §4A; DESIGN.md, Persistence: PostgreSQL's clock is the authority).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from site_coordination.adaptors import site_statements as sql
from site_coordination.adaptors.site_statements import NOTIFY_CHANNEL
from site_coordination.adaptors.tables import (
    array_task_attempts,
    command_grants,
    progress_reports,
    read_permits,
    site_streams,
)
from site_coordination.application.ports import RepositoryGrantRecord
from site_coordination.domain.authorisation import AttemptState
from site_coordination.domain.grants import CommandGrant
from site_coordination.domain.streams import (
    MATERIAL_KINDS,
    NewCommand,
    StoredCommand,
    StreamKey,
    result_ends_attempt,
)


class PostgresSiteStore:
    """Site Coordination's tables inside the caller's transaction (``session``)."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self._connection: Any = None

    async def _core(self) -> Any:
        """The session's connection, in its transaction: the hot statements run on it
        directly, skipping the ORM layer of ``Session.execute`` (same transaction,
        same error handling and pool invalidation)."""
        if self._connection is None:
            self._connection = await self.session.connection()
        return self._connection

    async def now(self) -> datetime:
        """``SELECT now()``."""
        return (await (await self._core()).execute(sql.NOW)).scalar_one()

    async def get_command(self, command_id: str) -> StoredCommand | None:
        """``SELECT`` the command by ``command_id``; None when absent."""
        row = (await (await self._core()).execute(sql.GET_COMMAND, {"w_command_id": command_id})).first()
        return sql.command_of(row) if row else None

    async def append_command(self, command: NewCommand, request_hash: str) -> StoredCommand:
        # The upsert takes the stream row's lock until commit, so concurrent appends
        # to one stream are serialised and numbers stay gapless (a rollback frees it).
        """Upsert ``site_streams.last_sequence + 1`` (locks the stream row), then insert.

        Returns the stored command with its sequence.
        """
        connection = await self._core()
        stream = {"v_site_id": command.stream.site_id, "v_environment": command.stream.environment}
        sequence = (await connection.execute(sql.NEXT_SEQUENCE, stream)).scalar_one()
        row = (await connection.execute(sql.INSERT_COMMAND, {
            **stream, "v_command_id": command.command_id, "v_sequence": sequence,
            "v_kind": command.kind, "v_run_id": command.run_id,
            "v_attempt_id": command.attempt_id, "v_attempt_number": command.attempt_number,
            "v_payload_json": command.payload_json, "v_request_hash": request_hash,
        })).one()
        return sql.command_of(row)

    async def add_array_tasks(self, command_id: str, attempt_ids: list[str]) -> None:
        """``INSERT`` one ``array_task_attempts`` row per task (a replay adds none)."""
        await (await self._core()).execute(
            insert(array_task_attempts).on_conflict_do_nothing(),
            [{"attempt_id": a, "command_id": command_id} for a in attempt_ids])

    def _stream_where(self, stream: StreamKey):
        return (site_streams.c.site_id == stream.site_id) & (
            site_streams.c.environment == stream.environment)

    async def command_for_result(self, command_id: str) -> tuple[StoredCommand, int] | None:
        # Lock the stream row (not the command) so every result of the stream is
        # decided after the previous one committed; one round trip.
        """One statement: the command and its stream's ``acknowledged_sequence``,
        the stream row ``FOR UPDATE``; None when the command is unknown.
        """
        row = (await (await self._core()).execute(
            sql.COMMAND_FOR_RESULT, {"command_id": command_id})).first()
        if row is None:
            return None
        return sql.command_of(row), int(row.acknowledged_sequence)

    async def deliver_next(self, stream: StreamKey) -> StoredCommand | None:
        """One statement: mark the command after the acknowledged one delivered; return it."""
        row = (await (await self._core()).execute(
            sql.DELIVER_NEXT, {"site_id": stream.site_id, "environment": stream.environment}
        )).first()
        return sql.command_of(row) if row else None

    async def grant_and_deliver_next(
        self, secret_sha256: str,
    ) -> tuple[CommandGrant | None, datetime, StoredCommand | None]:
        """One statement: the grant by secret hash, ``now()`` and, only when the grant is
        usable then, its stream's next command marked delivered.
        """
        row = (await (await self._core()).execute(
            sql.GRANT_AND_DELIVER_NEXT, {"hash": secret_sha256})).first()
        command = sql.command_of(row) if row.command_id is not None else None
        return sql.prefixed_grant_of(row), row.g_now, command

    async def grant_and_command_for_result(
        self, secret_sha256: str, command_id: str,
    ) -> tuple[CommandGrant | None, datetime, tuple[StoredCommand, int] | None]:
        """One statement: the grant by secret hash, ``now()`` and :meth:`command_for_result`."""
        row = (await (await self._core()).execute(
            sql.GRANT_AND_COMMAND_FOR_RESULT, {"hash": secret_sha256, "command_id": command_id},
        )).first()
        found = (sql.command_of(row), int(row.acknowledged_sequence)) if row.command_id else None
        return sql.prefixed_grant_of(row), row.g_now, found

    async def save_result(self, command: StoredCommand, result_json: str, *,
                          deliver_next: bool = False) -> StoredCommand | None:
        # One statement: the result, the acknowledgement advancing with it (seed 004
        # §4A: in the same transaction), the wake-up of long-polls at commit and, when
        # asked, the hand-out of the command after it (as ``deliver_next`` would).
        """One statement: store the result, advance ``acknowledged_sequence``, ``pg_notify``.

        With ``deliver_next`` also hands out the following command. Raises
        ``RuntimeError`` when the acknowledgement did not advance by exactly one row.
        """
        row = (await (await self._core()).execute(sql.SAVE_RESULT, {
            "result": result_json, "command_id": command.command_id, "deliver": deliver_next,
            "channel": NOTIFY_CHANNEL,
            "payload": f"{command.stream.site_id}\x1f{command.stream.environment}",
        })).first()
        if row is None or row.n != 1:
            raise RuntimeError("stream acknowledgement moved under a held lock")
        return sql.command_of(row) if row.command_id is not None else None

    async def add_progress(self, command_id: str, code: str) -> bool:
        """``INSERT INTO progress_reports ... ON CONFLICT DO NOTHING``; True when inserted."""
        result = await self.session.execute(
            insert(progress_reports).values(command_id=command_id, code=code)
            .on_conflict_do_nothing()
        )
        return result.rowcount == 1

    async def attempt_run_in_stream(self, stream: StreamKey, attempt_id: str) -> str | None:
        """``SELECT run_id`` of the stream's first command (by sequence) of ``attempt_id``;
        None when no command of ``stream`` names the Attempt."""
        return (await (await self._core()).execute(sql.ATTEMPT_RUN_IN_STREAM, {
            "w_attempt_id": attempt_id, "w_site_id": stream.site_id,
            "w_environment": stream.environment,
        })).scalar_one_or_none()

    async def add_native_end_notice(self, stream: StreamKey, run_id: str,
                                    attempt_id: str) -> bool:
        """``INSERT INTO native_end_notices ... ON CONFLICT (attempt_id) DO NOTHING``;
        True when inserted (a concurrent first notice waits for the other's commit)."""
        row = (await (await self._core()).execute(sql.ADD_NATIVE_END_NOTICE, {
            "v_attempt_id": attempt_id, "v_site_id": stream.site_id,
            "v_environment": stream.environment, "v_run_id": run_id,
        })).first()
        return row is not None

    async def notify(self, stream: StreamKey) -> None:
        # Delivered by PostgreSQL only when this transaction commits.
        """``SELECT pg_notify`` on the stream's channel payload (delivered at commit)."""
        await self.session.execute(
            text("SELECT pg_notify(:channel, :payload)"),
            {"channel": NOTIFY_CHANNEL, "payload": f"{stream.site_id}\x1f{stream.environment}"},
        )

    async def attempt(self, attempt_id: str) -> tuple[StreamKey, AttemptState] | None:
        """Scan the Attempt's commands by sequence: the last material command gives the
        material; ``completed`` when a result ends the Attempt; ``start_delivered`` once a
        ``start`` — or a ``start-array`` naming it as a task — was delivered. None without a
        material command.
        """
        rows = (await (await self._core()).execute(
            sql.ATTEMPT_COMMANDS, {"w_attempt_id": attempt_id})).all()
        material_row = None
        completed = False
        start_delivered = False
        for row in rows:
            if row.kind in MATERIAL_KINDS:
                material_row = row
            if row.kind == "start" and row.first_delivered_at is not None:
                start_delivered = True
            if row.result_json is not None and result_ends_attempt(
                row.kind, json.loads(row.result_json)
            ):
                completed = True
        if material_row is None:
            return None
        if not start_delivered:
            start_delivered = (await (await self._core()).execute(
                sql.ARRAY_TASK_DELIVERED, {"w_attempt_id": attempt_id})).first() is not None
        stream = StreamKey(material_row.site_id, material_row.environment)
        return stream, AttemptState(
            run_id=material_row.run_id, attempt_id=attempt_id,
            material=json.loads(material_row.payload_json), completed=completed,
            start_delivered=start_delivered,
        )

    async def insert_grant(self, grant: CommandGrant, secret_sha256: str) -> None:
        """``INSERT INTO command_grants``."""
        await self.session.execute(command_grants.insert().values(
            grant_id=grant.grant_id, site_id=grant.stream.site_id,
            environment=grant.stream.environment, secret_sha256=secret_sha256,
            label=grant.label, created_at=grant.created_at, expires_at=grant.expires_at,
        ))

    async def grant_by_hash(self, secret_sha256: str) -> tuple[CommandGrant | None, datetime]:
        """One statement: the grant by ``secret_sha256`` (or None) and ``now()``."""
        row = (await (await self._core()).execute(sql.GRANT_AND_NOW, {"hash": secret_sha256})).first()
        return (sql.grant_of(row) if row.grant_id is not None else None), row.now

    async def revoke_grant(self, grant_id: str) -> bool:
        """``UPDATE command_grants SET revoked_at = now()`` while unrevoked; True when changed."""
        result = await self.session.execute(
            update(command_grants).where(
                (command_grants.c.grant_id == grant_id) & command_grants.c.revoked_at.is_(None)
            ).values(revoked_at=func.now())
        )
        return result.rowcount == 1

    async def list_grants(self) -> list[CommandGrant]:
        """``SELECT`` every command grant ordered by ``created_at`` descending."""
        rows = (await self.session.execute(
            select(command_grants).order_by(command_grants.c.created_at.desc())
        )).all()
        return [sql.grant_of(r) for r in rows]

    async def insert_repository_grant(self, record: RepositoryGrantRecord, issued_by: str) -> None:
        """``INSERT INTO repository_grants``."""
        await (await self._core()).execute(sql.INSERT_REPOSITORY_GRANT, {
            "v_grant_id": record.grant_id, "v_site_id": record.stream.site_id,
            "v_environment": record.stream.environment, "v_run_id": record.run_id,
            "v_attempt_id": record.attempt_id, "v_direction": record.direction,
            "v_repository_url": record.repository_url, "v_username": record.username,
            "v_provider_ref": record.provider_ref, "v_issued_by": issued_by,
            "v_expires_at": record.expires_at,
        })

    async def repository_grant(self, grant_id: str) -> RepositoryGrantRecord | None:
        """``SELECT`` the repository grant by id; None when absent."""
        row = (await (await self._core()).execute(
            sql.REPOSITORY_GRANT, {"w_grant_id": grant_id})).first()
        if row is None:
            return None
        return RepositoryGrantRecord(
            grant_id=row.grant_id, stream=StreamKey(row.site_id, row.environment),
            run_id=row.run_id, attempt_id=row.attempt_id, direction=row.direction,
            repository_url=row.repository_url, username=row.username,
            provider_ref=row.provider_ref, expires_at=row.expires_at, revoked_at=row.revoked_at,
        )

    async def revoke_repository_grant(self, grant_id: str) -> None:
        """``UPDATE repository_grants SET revoked_at = now()`` while unrevoked."""
        await (await self._core()).execute(sql.REVOKE_REPOSITORY_GRANT, {"w_grant_id": grant_id})

    async def insert_read_permit(self, permit: dict[str, Any]) -> None:
        """``INSERT INTO read_permits``."""
        await self.session.execute(read_permits.insert().values(**permit))

    async def read_permit(self, permit_id: str) -> dict[str, Any] | None:
        """``SELECT`` the permit with ``live = expires_at > now()``; None when absent."""
        row = (await self.session.execute(
            select(read_permits, (read_permits.c.expires_at > func.now()).label("live"))
            .where(read_permits.c.permit_id == permit_id)
        )).mappings().first()
        return dict(row) if row else None
