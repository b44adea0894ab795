"""RabbitMQ side through the lead's :class:`CommandServer`: ``AppendSiteCommand``
(one-way from Execution Core's outbox, idempotent by command_id; seed 004 §4A) and
the operator commands and queries on command grants (``sites.grants``).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from metallo.messaging import CommandServer, Rejected, Topology
from metallo.site_coordination.v1 import site_coordination_pb2 as sc_pb2
from site_coordination.adaptors.audit import (
    TRAIL,
    record_repository_grant_revocations,
    register_audit_query,
)
from site_coordination.adaptors.lab_git.tokens import LabSourceControl
from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.adaptors.run_ends_store import PostgresRunEnds
from site_coordination.application.operators import (
    operator_create_grant,
    operator_list_grants,
    operator_revoke_grant,
)
from site_coordination.application.ports import AuthorityUnavailable, OperatorAuthority
from site_coordination.application.run_ends import earlier_attempts_ended
from site_coordination.application.streams import append_command
from site_coordination.domain.errors import Refusal
from site_coordination.domain.grants import CommandGrant


def grant_message(grant: CommandGrant) -> sc_pb2.CommandGrant:
    """The contract's CommandGrant (RFC 3339 times; never a secret)."""
    def iso(value: datetime | None) -> str:
        return value.isoformat(timespec="seconds") if value is not None else ""

    return sc_pb2.CommandGrant(
        grant_id=grant.grant_id, site_id=grant.stream.site_id,
        environment=grant.stream.environment, label=grant.label,
        created_at=iso(grant.created_at), expires_at=iso(grant.expires_at),
        revoked_at=iso(grant.revoked_at))


def _in(session: AsyncSession):
    """A transaction factory over the server's own transaction (commits with it)."""
    @asynccontextmanager
    async def transaction():
        yield PostgresSiteStore(session)

    return transaction


@asynccontextmanager
async def _refusals():
    """Refusals become saved rejections; an unusable governance file a transient one."""
    try:
        yield
    except Refusal as exc:
        raise Rejected(exc.code, exc.message) from exc
    except AuthorityUnavailable as exc:
        raise Rejected("governance-unavailable", str(exc), transient=True) from exc


def build_command_server(engine: AsyncEngine, amqp_url: str, topology: Topology,
                         authority: OperatorAuthority | None = None) -> CommandServer:
    """A :class:`CommandServer` for the ``site_coordination`` context with its handlers,
    auditing the grant commands; the operator ones and ``ListAuditRecords`` are
    registered when ``authority`` is given."""
    server = CommandServer("site_coordination", engine, amqp_url, topology, audit=TRAIL)

    @server.command(sc_pb2.AppendSiteCommand)
    async def append(session: AsyncSession, command: sc_pb2.AppendSiteCommand
                     ) -> sc_pb2.AppendSiteCommandReply:
        store = PostgresSiteStore(session)
        try:
            stored = await append_command(store, command)
        except Refusal as exc:
            raise Rejected(exc.code, exc.message) from exc
        # A later Attempt of the Run: every earlier one has ended, and its grants with it.
        revoked = await earlier_attempts_ended(PostgresRunEnds(session),
                                               LabSourceControl(session), store,
                                               stored.run_id, stored.attempt_number)
        await record_repository_grant_revocations(session, store, revoked,
                                                  reason="attempt-ended")
        return sc_pb2.AppendSiteCommandReply(
            command_id=stored.command_id, site_id=stored.stream.site_id,
            environment=stored.stream.environment, sequence=stored.sequence,
        )

    if authority is None:
        return server

    @server.command(sc_pb2.CreateCommandGrant)
    async def create_grant(session: AsyncSession, command: sc_pb2.CreateCommandGrant
                           ) -> sc_pb2.CreateCommandGrantReply:
        async with _refusals():
            grant = await operator_create_grant(
                _in(session), authority, command.metadata.acting_member, command.site_id,
                command.environment, command.expires, command.label, command.secret_sha256)
        return sc_pb2.CreateCommandGrantReply(grant=grant_message(grant))

    @server.command(sc_pb2.RevokeCommandGrant)
    async def revoke_grant(session: AsyncSession, command: sc_pb2.RevokeCommandGrant
                           ) -> sc_pb2.RevokeCommandGrantReply:
        async with _refusals():
            revoked = await operator_revoke_grant(
                _in(session), authority, command.metadata.acting_member, command.grant_id)
        return sc_pb2.RevokeCommandGrantReply(grant_id=command.grant_id, revoked=revoked)

    @server.query(sc_pb2.ListCommandGrants)
    async def list_grants(session: AsyncSession, query: sc_pb2.ListCommandGrants
                          ) -> sc_pb2.ListCommandGrantsReply:
        async with _refusals():
            grants = await operator_list_grants(_in(session), authority,
                                                query.metadata.acting_member)
        return sc_pb2.ListCommandGrantsReply(grants=[grant_message(g) for g in grants])

    register_audit_query(server, authority)
    return server
