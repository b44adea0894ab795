"""Binds Execution Core's use cases to RabbitMQ (CommandServer, EventConsumer)."""

from __future__ import annotations

from execution_core.application import requests, results
from execution_core.application.ports import MessageOutbox, ProjectAuthority, RunStore
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import CommandServer, EventConsumer
from metallo.site_coordination.v1 import site_coordination_pb2 as sc


def register_requests(
    server: CommandServer, store: RunStore, authority: ProjectAuthority, outbox: MessageOutbox
) -> None:
    """Serve LaunchRun, CancelRun (commands) and GetRun, ListRuns (queries) on ``server``."""

    @server.command(pb.LaunchRun)
    async def launch(session, cmd):
        return await requests.launch_run(
            session, cmd, store=store, authority=authority, outbox=outbox
        )

    @server.command(pb.CancelRun)
    async def cancel(session, cmd):
        return await requests.cancel_run(
            session, cmd, store=store, authority=authority, outbox=outbox
        )

    @server.query(pb.GetRun)
    async def get(session, q):
        return await requests.get_run(session, q, store=store, authority=authority)

    @server.query(pb.ListRuns)
    async def list_(session, q):
        return await requests.list_runs(session, q, store=store, authority=authority)


def register_events(consumer: EventConsumer, store: RunStore) -> None:
    """Consume Site Coordination's SiteCommandResultRecorded and SiteCommandAppended."""

    @consumer.on(sc.SiteCommandResultRecorded)
    async def on_result(session, event):
        await results.apply_result(session, event, store=store)

    @consumer.on(sc.SiteCommandAppended)
    async def on_appended(session, event):
        await results.apply_appended(session, event, store=store)
