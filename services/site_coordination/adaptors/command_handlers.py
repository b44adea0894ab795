"""RabbitMQ side: ``AppendSiteCommand`` through the lead's :class:`CommandServer`
(one-way from Execution Core's outbox, idempotent by command_id; seed 004 §4A).
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from metallo.messaging import CommandServer, Rejected, Topology
from metallo.site_coordination.v1 import site_coordination_pb2 as sc_pb2
from site_coordination.adaptors.postgres_store import PostgresSiteStore
from site_coordination.application.streams import append_command
from site_coordination.domain.errors import Refusal


def build_command_server(engine: AsyncEngine, amqp_url: str, topology: Topology) -> CommandServer:
    """A :class:`CommandServer` for the ``site_coordination`` context with its handlers."""
    server = CommandServer("site_coordination", engine, amqp_url, topology)

    @server.command(sc_pb2.AppendSiteCommand)
    async def append(session: AsyncSession, command: sc_pb2.AppendSiteCommand
                     ) -> sc_pb2.AppendSiteCommandReply:
        try:
            stored = await append_command(PostgresSiteStore(session), command)
        except Refusal as exc:
            raise Rejected(exc.code, exc.message) from exc
        return sc_pb2.AppendSiteCommandReply(
            command_id=stored.command_id, site_id=stored.stream.site_id,
            environment=stored.stream.environment, sequence=stored.sequence,
        )

    return server
