"""Handlers of Pipeline Coordination's commands, queries and consumed events."""

from __future__ import annotations

from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import CommandServer, EventConsumer
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from metallo.repository_policy import RepositoryPolicy
from pipeline_coordination.adaptors.projection import (
    collection_message,
    collection_state,
    pipeline_message,
)
from pipeline_coordination.application import collection_requests, requests
from pipeline_coordination.application.ports import PipelineStore, ProjectAuthority
from pipeline_coordination.domain.rerun import rerun_steps


def register_requests(server: CommandServer, store: PipelineStore, authority: ProjectAuthority,
                      policy: RepositoryPolicy | None = None) -> None:
    """StartPipeline, RerunPipeline, StopPipeline (commands); GetPipeline, ListPipelines
    (queries). ``policy``: the repository policy StartPipeline checks first (None: only
    Workload Portfolio's check, when it prepares)."""

    @server.command(pb.StartPipeline)
    async def start(session, cmd: pb.StartPipeline) -> pb.StartPipelineReply:
        pipeline_id, state = await requests.start_pipeline(
            session,
            store,
            authority,
            command_id=cmd.metadata.command_id,
            project=cmd.metadata.project,
            member=cmd.metadata.acting_member,
            repository_url=cmd.repository_url,
            branch=cmd.branch,
            actions=list(cmd.actions),
            policy=policy,
            max_active=cmd.max_active,
        )
        return pb.StartPipelineReply(pipeline_id=pipeline_id, state=state)

    @server.command(pb.RerunPipeline)
    async def rerun(session, cmd: pb.RerunPipeline) -> pb.RerunPipelineReply:
        new = await requests.rerun_pipeline(
            session,
            store,
            authority,
            command_id=cmd.metadata.command_id,
            project=cmd.metadata.project,
            member=cmd.metadata.acting_member,
            pipeline_id=cmd.pipeline_id,
            failed_only=cmd.failed_only,
            max_active=cmd.max_active,
        )
        return pb.RerunPipelineReply(
            pipeline_id=new.pipeline_id, state=new.state, rerun_of=new.rerun_of, rerun_steps=rerun_steps(new)
        )

    @server.command(pb.StopPipeline)
    async def stop(session, cmd: pb.StopPipeline) -> pb.StopPipelineReply:
        recorded, state, version = await requests.stop_pipeline(
            session,
            store,
            authority,
            project=cmd.metadata.project,
            member=cmd.metadata.acting_member,
            pipeline_id=cmd.pipeline_id,
            reason=cmd.reason,
        )
        return pb.StopPipelineReply(pipeline_id=cmd.pipeline_id, stop_recorded=recorded, state=state, version=version)

    @server.query(pb.GetPipeline)
    async def get(session, q: pb.GetPipeline) -> pb.Pipeline:
        p, meta = await requests.get_pipeline(
            session, store, authority, project=q.metadata.project, member=q.metadata.acting_member, pipeline_id=q.pipeline_id
        )
        return pipeline_message(p, meta)

    @server.query(pb.ListPipelines)
    async def list_(session, q: pb.ListPipelines) -> pb.ListPipelinesReply:
        rows, token = await requests.list_pipelines(
            session,
            store,
            authority,
            project=q.metadata.project,
            member=q.metadata.acting_member,
            page_size=q.page.page_size,
            page_token=q.page.page_token,
            state=q.state,
        )
        return pb.ListPipelinesReply(
            pipelines=[pipeline_message(p, m) for p, m in rows], page=common_pb2.PageInfo(next_page_token=token)
        )


def register_collection_requests(server: CommandServer, store: PipelineStore, authority: ProjectAuthority) -> None:
    """CancelCollection (command); GetCollection, ListCollections (queries)."""

    @server.command(pb.CancelCollection)
    async def cancel(session, cmd: pb.CancelCollection) -> pb.CancelCollectionReply:
        recorded, p, s = await collection_requests.cancel_collection(
            session, store, authority, project=cmd.metadata.project, member=cmd.metadata.acting_member,
            collection_id=cmd.collection_id, reason=cmd.reason,
        )
        return pb.CancelCollectionReply(
            collection_id=cmd.collection_id, cancel_recorded=recorded, state=collection_state(p, s)
        )

    @server.query(pb.GetCollection)
    async def get(session, q: pb.GetCollection) -> pb.Collection:
        p, s = await collection_requests.get_collection(
            session, store, authority, project=q.metadata.project, member=q.metadata.acting_member,
            collection_id=q.collection_id,
        )
        return collection_message(p, s, carried=await collection_requests.carried_pins(session, store, s))

    @server.query(pb.ListCollections)
    async def list_(session, q: pb.ListCollections) -> pb.ListCollectionsReply:
        rows, token = await collection_requests.list_collections(
            session, store, authority, project=q.metadata.project, member=q.metadata.acting_member,
            pipeline_id=q.pipeline_id, size=q.page.page_size, page_token=q.page.page_token,
        )
        return pb.ListCollectionsReply(
            collections=[collection_message(p, s, with_items=False) for p, s in rows],
            page=common_pb2.PageInfo(next_page_token=token),
        )


def register_events(consumer: EventConsumer, store: PipelineStore) -> None:
    """RunCompleted from Execution Core (inbox receipt in the same transaction)."""

    @consumer.on(ec.RunCompleted)
    async def on_run_completed(session, event: ec.RunCompleted) -> None:
        await requests.run_completed(
            session,
            store,
            run_id=event.run_id,
            outcome=event.outcome,
            reason_code=event.reason_code,
            output_commit=event.output_commit,
            launch_key=event.launch_key,
            labels=dict(event.labels),
            array_start=event.array_start,
        )
