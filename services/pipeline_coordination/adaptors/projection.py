"""Domain values → protobuf read model and events (contracts/proto/metallo/pipeline_coordination/v1)."""

from __future__ import annotations

from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp

from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from pipeline_coordination.application.ports import Meta
from pipeline_coordination.domain import collection, identities
from pipeline_coordination.domain.pipeline import Pipeline, Step
from pipeline_coordination.domain.schedule import counts, partial


def _ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    t = Timestamp()
    t.FromDatetime(value)
    return t


def step_message(pipeline_id: str, s: Step) -> pb.PipelineStep:
    """One step as the contract shows it."""
    return pb.PipelineStep(
        index=s.index,
        action=s.action,
        workload_id=s.workload_id,
        prepared_revision=s.prepared_revision,
        revision=s.revision,
        family=s.family,
        environment=s.environment,
        service_kind=s.service_kind,
        state=s.state,
        pinned_commit=s.pinned_commit,
        run_id=s.run_id,
        launch_key=s.launch_key(pipeline_id),
        launch_command_id=s.launch_command_id,
        run_outcome=s.run_outcome,
        reason_code=s.reason_code,
        message=s.message,
        output_commit=s.output_commit,
        endpoint=s.endpoint,
        launch_attempt=s.launch_attempt,
        started_at=_ts(s.started_at),
        ended_at=_ts(s.ended_at),
        needs=list(s.needs),
        when=s.when,
        carried_from=s.carried_from,
        collection_id=s.collection_id,
        collection_counts=pb.CollectionCounts(**collection.counts(s.items)) if s.is_collection else None,
    )


def pipeline_message(p: Pipeline, meta: Meta) -> pb.Pipeline:
    """A Pipeline with its steps (GetPipeline, ListPipelines)."""
    return pb.Pipeline(
        pipeline_id=p.pipeline_id,
        project=p.project,
        initiating_member=p.initiating_member,
        repository_url=p.repository_url,
        branch=p.branch,
        requested_actions=list(p.requested_actions),
        state=p.state,
        desired_state=p.desired_state,
        prepared_commit=p.prepared_commit,
        failed_step=p.failed_step,
        reason_code=p.reason_code,
        message=p.message,
        steps=[step_message(p.pipeline_id, s) for s in p.steps],
        start_command_id=meta.start_command_id,
        stopped_by=p.stopped_by,
        stop_reason=p.stop_reason,
        created_at=_ts(meta.created_at),
        updated_at=_ts(meta.updated_at),
        ended_at=_ts(p.ended_at),
        version=meta.version,
        last_error=p.last_error,
        request_round=p.request_round,
        max_active=p.max_active,
        rerun_of=p.rerun_of,
        counts=pb.StepCounts(**counts(p)),
        partial=partial(p),
    )


def pipeline_completed(p: Pipeline) -> pb.PipelineCompleted:
    """The event committed with the Pipeline's final state."""
    failed_action = ""
    if p.failed_step:
        failed_action = next((s.action for s in p.steps if s.index == p.failed_step), "")
    return pb.PipelineCompleted(
        pipeline_id=p.pipeline_id,
        project=p.project,
        outcome=p.state,
        failed_step=p.failed_step,
        failed_action=failed_action,
        reason_code=p.reason_code,
        initiating_member=p.initiating_member,
        steps=[step_message(p.pipeline_id, s) for s in p.steps],
        counts=pb.StepCounts(**counts(p)),
        partial=partial(p),
        rerun_of=p.rerun_of,
    )


def collection_state(p: Pipeline, s: Step) -> str:
    """waiting (not started) | running | cancelling | succeeded | failed | cancelled."""
    if s.state in ("succeeded", "failed", "cancelled", "skipped"):
        return "cancelled" if s.state == "skipped" else s.state
    if s.state == "launched":
        return "cancelling" if s.cancelled_by or p.desired_state != "run" else "running"
    return "waiting"


def item_message(pipeline_id: str, s: Step, i: collection.Item,
                 carried: dict[str, tuple[int, str]] | None = None) -> pb.CollectionItem:
    """One child as the contract shows it; ``carried`` gives the (revision, commit) a carried
    child's Run ran, by the Pipeline it comes from (unknown: left empty)."""
    revision, commit = (carried or {}).get(i.carried_from, (0, "")) if i.carried_from else (
        s.revision, s.pinned_commit)
    return pb.CollectionItem(
        index=i.index,
        parameters=i.parameters,
        state=i.state,
        run_id=i.run_id,
        # A carried child's Run was launched by the Pipeline it was carried from.
        launch_key=identities.item_key(i.carried_from or pipeline_id, s.index, s.launch_attempt, i.index),
        run_outcome=i.run_outcome,
        reason_code=i.reason_code,
        message=i.message,
        output_commit=i.output_commit,
        started_at=_ts(i.started_at),
        ended_at=_ts(i.ended_at),
        carried_from=i.carried_from,
        revision=revision,
        pinned_commit=commit,
    )


def collection_message(p: Pipeline, s: Step, *, with_items: bool = True,
                       item_counts: dict[str, int] | None = None,
                       carried: dict[str, tuple[int, str]] | None = None) -> pb.Collection:
    """A collection step (GetCollection with its children; ListCollections without, counted);
    ``carried`` as :func:`item_message` takes it."""
    shape = s.collection or collection.Shape()
    return pb.Collection(
        collection_id=s.collection_id,
        project=p.project,
        pipeline_id=p.pipeline_id,
        step_index=s.index,
        action=s.action,
        workload_id=s.workload_id,
        revision=s.revision,
        pinned_commit=s.pinned_commit,
        state=collection_state(p, s),
        max_active=shape.max_active,
        fail_fast=shape.fail_fast,
        array=shape.array,
        array_decision=s.array_decision,
        counts=pb.CollectionCounts(**(item_counts if item_counts is not None else collection.counts(s.items))),
        items=[item_message(p.pipeline_id, s, i, carried) for i in s.items] if with_items else [],
        reason_code=s.reason_code,
        message=s.message,
        cancelled_by=s.cancelled_by,
        cancel_reason=s.cancel_reason,
    )


def collection_completed(p: Pipeline, s: Step) -> pb.CollectionCompleted:
    """The event committed with a collection step's final state."""
    return pb.CollectionCompleted(
        collection_id=s.collection_id,
        project=p.project,
        pipeline_id=p.pipeline_id,
        step_index=s.index,
        action=s.action,
        outcome=collection_state(p, s),
        counts=pb.CollectionCounts(**collection.counts(s.items)),
    )
