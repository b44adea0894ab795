"""The SQL of :class:`~site_coordination.adaptors.postgres_store.PostgresSiteStore`,
built once (ADR 0013), and the converters of its rows to domain values."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.dialects.postgresql import insert

from metallo.persistence.prebuilt import set_clause
from site_coordination.adaptors.tables import (
    array_task_attempts,
    native_end_notices,
    repository_grants,
    site_commands,
    site_streams,
)
from site_coordination.domain.grants import CommandGrant
from site_coordination.domain.streams import StoredCommand, StreamKey

NOTIFY_CHANNEL = "metallo_site_commands"

# The edge's hot statements are plain SQL built once: a pull and a result each
# cost a few round trips and little statement building.
GRANT_AND_NOW = text("""
    SELECT now() AS now, g.grant_id, g.site_id, g.environment, g.label, g.created_at,
           g.expires_at, g.revoked_at
    FROM (SELECT 1) AS one LEFT JOIN command_grants g ON g.secret_sha256 = :hash
""")
DELIVER_NEXT = text("""
    UPDATE site_commands c
    SET first_delivered_at = coalesce(c.first_delivered_at, now()),
        delivery_count = c.delivery_count + 1
    FROM site_streams s
    WHERE s.site_id = :site_id AND s.environment = :environment
      AND c.site_id = s.site_id AND c.environment = s.environment
      AND c.sequence = s.acknowledged_sequence + 1
    RETURNING c.*
""")
COMMAND_FOR_RESULT = text("""
    SELECT c.*, s.acknowledged_sequence
    FROM site_commands c
    JOIN site_streams s ON s.site_id = c.site_id AND s.environment = c.environment
    WHERE c.command_id = :command_id
    FOR UPDATE OF s
""")

# The grant's columns under ``g_`` names so they sit beside a command's in one row.
GRANT_COLUMNS = """
    SELECT now() AS g_now, g.grant_id AS g_grant_id, g.site_id AS g_site_id,
           g.environment AS g_environment, g.label AS g_label, g.created_at AS g_created_at,
           g.expires_at AS g_expires_at, g.revoked_at AS g_revoked_at
    FROM (SELECT 1) AS one LEFT JOIN command_grants g ON g.secret_sha256 = :hash
"""
# A pull in one statement: the grant read afresh and, only when it is usable now
# (the same rule as ``domain.grants.check_grant``), the delivery of the next command
# of its stream. An unusable grant delivers nothing; the caller then refuses.
GRANT_AND_DELIVER_NEXT = text(f"""
    WITH g AS ({GRANT_COLUMNS}), d AS (
        UPDATE site_commands c
        SET first_delivered_at = coalesce(c.first_delivered_at, now()),
            delivery_count = c.delivery_count + 1
        FROM site_streams s, g
        WHERE g.g_grant_id IS NOT NULL AND g.g_revoked_at IS NULL AND g.g_expires_at > g.g_now
          AND s.site_id = g.g_site_id AND s.environment = g.g_environment
          AND c.site_id = s.site_id AND c.environment = s.environment
          AND c.sequence = s.acknowledged_sequence + 1
        RETURNING c.*
    )
    SELECT g.*, d.* FROM g LEFT JOIN d ON true
""")
# A result's first read in one statement: the grant afresh, and the command with its
# stream's acknowledgement, the stream row locked for the transaction (as
# ``COMMAND_FOR_RESULT``). MATERIALIZED keeps the locking read a statement of its own.
GRANT_AND_COMMAND_FOR_RESULT = text(f"""
    WITH g AS ({GRANT_COLUMNS}), c AS MATERIALIZED (
        SELECT c.*, s.acknowledged_sequence
        FROM site_commands c
        JOIN site_streams s ON s.site_id = c.site_id AND s.environment = c.environment
        WHERE c.command_id = :command_id
        FOR UPDATE OF s
    )
    SELECT g.*, c.* FROM g LEFT JOIN c ON true
""")

SAVE_RESULT = text("""
    WITH saved AS (
        UPDATE site_commands SET result_json = :result, result_recorded_at = now()
        WHERE command_id = :command_id AND result_json IS NULL
        RETURNING site_id, environment, sequence
    ), acked AS (
        UPDATE site_streams s SET acknowledged_sequence = saved.sequence
        FROM saved
        WHERE s.site_id = saved.site_id AND s.environment = saved.environment
          AND s.acknowledged_sequence = saved.sequence - 1
        RETURNING s.site_id, s.environment, s.acknowledged_sequence
    ), handed AS (
        UPDATE site_commands c
        SET first_delivered_at = coalesce(c.first_delivered_at, now()),
            delivery_count = c.delivery_count + 1
        FROM acked a
        WHERE CAST(:deliver AS boolean)
          AND c.site_id = a.site_id AND c.environment = a.environment
          AND c.sequence = a.acknowledged_sequence + 1
        RETURNING c.*
    )
    SELECT (SELECT count(*) FROM acked) AS n, pg_notify(:channel, :payload) AS notified, handed.*
    FROM (SELECT 1) AS one LEFT JOIN handed ON true
""")


def prefixed_grant_of(row: Any) -> CommandGrant | None:
    """The ``g_*`` grant columns of a joined row as a :class:`CommandGrant` (None: no grant)."""
    if row.g_grant_id is None:
        return None
    return CommandGrant(
        grant_id=row.g_grant_id, stream=StreamKey(row.g_site_id, row.g_environment),
        label=row.g_label, created_at=row.g_created_at, expires_at=row.g_expires_at,
        revoked_at=row.g_revoked_at,
    )


def command_of(row: Any) -> StoredCommand:
    """A ``site_commands`` row as a :class:`StoredCommand`."""
    return StoredCommand(
        command_id=row.command_id,
        stream=StreamKey(row.site_id, row.environment),
        sequence=row.sequence,
        kind=row.kind,
        run_id=row.run_id,
        attempt_id=row.attempt_id,
        attempt_number=row.attempt_number,
        payload=json.loads(row.payload_json),
        request_hash=row.request_hash,
        delivered=row.first_delivered_at is not None,
        result_json=row.result_json,
    )


# Built once (ADR 0013); ``w_*``/``v_*`` are their parameters.
NOW = select(func.now())
GET_COMMAND = select(site_commands).where(site_commands.c.command_id == bindparam("w_command_id"))
NEXT_SEQUENCE = (
    insert(site_streams)
    .values(
        site_id=bindparam("v_site_id"), environment=bindparam("v_environment"),
        last_sequence=1, acknowledged_sequence=0,
    )
    .on_conflict_do_update(
        index_elements=["site_id", "environment"],
        set_={"last_sequence": site_streams.c.last_sequence + 1},
    )
    .returning(site_streams.c.last_sequence)
)
INSERT_COMMAND = (
    site_commands.insert()
    .values(**set_clause(site_commands, (
        "command_id", "site_id", "environment", "sequence", "kind", "run_id",
        "attempt_id", "attempt_number", "payload_json", "request_hash")))
    .returning(site_commands)
)
ATTEMPT_COMMANDS = (
    select(site_commands).where(site_commands.c.attempt_id == bindparam("w_attempt_id"))
    .order_by(site_commands.c.sequence)
)
ARRAY_TASK_DELIVERED = (
    select(array_task_attempts.c.command_id)
    .join(site_commands, site_commands.c.command_id == array_task_attempts.c.command_id)
    .where(array_task_attempts.c.attempt_id == bindparam("w_attempt_id"),
           site_commands.c.first_delivered_at.is_not(None))
    .limit(1)
)
ATTEMPT_RUN_IN_STREAM = (
    select(site_commands.c.run_id).where(
        (site_commands.c.attempt_id == bindparam("w_attempt_id"))
        & (site_commands.c.site_id == bindparam("w_site_id"))
        & (site_commands.c.environment == bindparam("w_environment")))
    .order_by(site_commands.c.sequence).limit(1)
)
ADD_NATIVE_END_NOTICE = (
    insert(native_end_notices)
    .values(**set_clause(native_end_notices, ("attempt_id", "site_id", "environment", "run_id")))
    .on_conflict_do_nothing(index_elements=["attempt_id"])
    .returning(native_end_notices.c.attempt_id)
)
REPOSITORY_GRANT = select(repository_grants).where(
    repository_grants.c.grant_id == bindparam("w_grant_id"))
REVOKE_REPOSITORY_GRANT = update(repository_grants).where(
    (repository_grants.c.grant_id == bindparam("w_grant_id"))
    & repository_grants.c.revoked_at.is_(None)
).values(revoked_at=func.now())
INSERT_REPOSITORY_GRANT = repository_grants.insert().values(**set_clause(repository_grants, (
    "grant_id", "site_id", "environment", "run_id", "attempt_id", "direction",
    "repository_url", "username", "provider_ref", "issued_by", "expires_at")))


def grant_of(row: Any) -> CommandGrant:
    """A ``command_grants`` row as a :class:`CommandGrant`."""
    return CommandGrant(
        grant_id=row.grant_id, stream=StreamKey(row.site_id, row.environment), label=row.label,
        created_at=row.created_at, expires_at=row.expires_at, revoked_at=row.revoked_at,
    )
