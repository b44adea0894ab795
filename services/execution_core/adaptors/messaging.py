"""Binds Execution Core's use cases to RabbitMQ (CommandServer, EventConsumer)."""

from __future__ import annotations

from execution_core.adaptors.log_read_store import SqlLogReadStore
from execution_core.application import log_reads, operators, reconcile, requests, results
from execution_core.application.array_groups import ArrayGroups
from execution_core.application.ports import (
    LogReadStore,
    MessageOutbox,
    OperatorAuthority,
    ProjectAuthority,
    RunStore,
    SiteDrainStore,
)
from execution_core.application.rerun import rerun_run
from execution_core.application.settings import Settings
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import CommandServer, EventConsumer
from metallo.site_coordination.v1 import site_coordination_pb2 as sc


def register_requests(
    server: CommandServer,
    store: RunStore,
    authority: ProjectAuthority,
    outbox: MessageOutbox,
    *,
    reads: LogReadStore | None = None,
    settings: Settings | None = None,
    groups: ArrayGroups | None = None,
) -> None:
    """Serve LaunchRun, RerunRun, CancelRun, ReconcileRun, ReadRunLog (commands) and GetRun,
    ListRuns, GetRunLogRead (queries) on ``server``."""
    reads = reads or SqlLogReadStore()
    settings = settings or Settings()

    @server.command(pb.LaunchRun)
    async def launch(session, cmd):
        return await requests.launch_run(
            session, cmd, store=store, authority=authority, outbox=outbox, groups=groups
        )

    @server.command(pb.CancelRun)
    async def cancel(session, cmd):
        return await requests.cancel_run(
            session, cmd, store=store, authority=authority, outbox=outbox
        )

    @server.command(pb.RerunRun)
    async def rerun(session, cmd):
        return await rerun_run(session, cmd, store=store, authority=authority, outbox=outbox)

    @server.command(pb.ReconcileRun)
    async def reconcile_(session, cmd):
        return await reconcile.reconcile_run(
            session, cmd, store=store, authority=authority, settings=settings
        )

    @server.query(pb.GetRun)
    async def get(session, q):
        return await requests.get_run(session, q, store=store, authority=authority)

    @server.query(pb.ListRuns)
    async def list_(session, q):
        return await requests.list_runs(session, q, store=store, authority=authority)

    @server.command(pb.ReadRunLog)
    async def read_log(session, cmd):
        return await log_reads.read_run_log(
            session,
            cmd,
            store=store,
            reads=reads,
            authority=authority,
            outbox=outbox,
            settings=settings,
        )

    @server.query(pb.GetRunLogRead)
    async def get_log_read(session, q):
        return await log_reads.get_run_log_read(
            session, q, store=store, reads=reads, authority=authority
        )


def register_operator_requests(
    server: CommandServer, drains: SiteDrainStore, authority: OperatorAuthority,
    *, settings: Settings | None = None,
) -> None:
    """Serve the operator requests DrainSite, ResumeSite (commands) and ListSiteDrains,
    CountActiveRuns (queries) on ``server``."""
    settings = settings or Settings()

    @server.command(pb.DrainSite)
    async def drain(session, cmd):
        return await operators.drain_site(session, cmd, drains=drains, authority=authority)

    @server.command(pb.ResumeSite)
    async def resume(session, cmd):
        return await operators.resume_site(session, cmd, drains=drains, authority=authority)

    @server.query(pb.ListSiteDrains)
    async def list_drains(session, q):
        return await operators.list_site_drains(session, q, drains=drains, authority=authority)

    @server.query(pb.CountActiveRuns)
    async def count_active(session, q):
        return await operators.count_active_runs(
            session, q, drains=drains, authority=authority,
            lost_after_seconds=settings.lost_after_seconds)


def register_events(
    consumer: EventConsumer,
    store: RunStore,
    *,
    reads: LogReadStore | None = None,
    groups: ArrayGroups | None = None,
) -> None:
    """Consume Site Coordination's SiteCommandResultRecorded (results of ``read-log``
    commands answer log reads), SiteNativeEndNoticed (ADR 0016: the next observe is
    due at once) and SiteProgressReported (a deferral: the Run's waiting reason);
    SiteCommandAppended is retired (ADR 0014)."""
    reads = reads or SqlLogReadStore()

    @consumer.on(sc.SiteCommandResultRecorded)
    async def on_result(session, event):
        if event.kind == log_reads.READ_LOG:
            await log_reads.apply_log_result(session, event, store=store, reads=reads)
            return
        await results.apply_result(session, event, store=store, groups=groups)

    @consumer.on(sc.SiteNativeEndNoticed)
    async def on_native_end(session, event):
        await results.apply_native_end_notice(session, event, store=store)

    @consumer.on(sc.SiteProgressReported)
    async def on_progress(session, event):
        await results.apply_progress(session, event, store=store)

    # The result event carries the stream sequence too; nothing else here used it.
    consumer.retire(sc.SiteCommandAppended)
