"""Domain values → protobuf read model and events (contracts/proto/metallo/pipeline_coordination/v1)."""

from __future__ import annotations

from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp

from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pb
from pipeline_coordination.application.ports import Meta
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
