import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from metallo.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartPipeline(_message.Message):
    __slots__ = ("metadata", "repository_url", "branch", "actions", "max_active")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    repository_url: str
    branch: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    max_active: int
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., repository_url: _Optional[str] = ..., branch: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., max_active: _Optional[int] = ...) -> None: ...

class StartPipelineReply(_message.Message):
    __slots__ = ("pipeline_id", "state")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    state: str
    def __init__(self, pipeline_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class StopPipeline(_message.Message):
    __slots__ = ("metadata", "pipeline_id", "reason")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    pipeline_id: str
    reason: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., pipeline_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class StopPipelineReply(_message.Message):
    __slots__ = ("pipeline_id", "stop_recorded", "state", "version")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_RECORDED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    stop_recorded: bool
    state: str
    version: int
    def __init__(self, pipeline_id: _Optional[str] = ..., stop_recorded: _Optional[bool] = ..., state: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class RerunPipeline(_message.Message):
    __slots__ = ("metadata", "pipeline_id", "failed_only", "max_active")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_ONLY_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    pipeline_id: str
    failed_only: bool
    max_active: int
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., pipeline_id: _Optional[str] = ..., failed_only: _Optional[bool] = ..., max_active: _Optional[int] = ...) -> None: ...

class RerunPipelineReply(_message.Message):
    __slots__ = ("pipeline_id", "state", "rerun_of", "rerun_steps")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RERUN_OF_FIELD_NUMBER: _ClassVar[int]
    RERUN_STEPS_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    state: str
    rerun_of: str
    rerun_steps: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pipeline_id: _Optional[str] = ..., state: _Optional[str] = ..., rerun_of: _Optional[str] = ..., rerun_steps: _Optional[_Iterable[int]] = ...) -> None: ...

class CancelCollection(_message.Message):
    __slots__ = ("metadata", "collection_id", "reason")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    collection_id: str
    reason: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., collection_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelCollectionReply(_message.Message):
    __slots__ = ("collection_id", "cancel_recorded", "state")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RECORDED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    cancel_recorded: bool
    state: str
    def __init__(self, collection_id: _Optional[str] = ..., cancel_recorded: _Optional[bool] = ..., state: _Optional[str] = ...) -> None: ...

class GetPipeline(_message.Message):
    __slots__ = ("metadata", "pipeline_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    pipeline_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., pipeline_id: _Optional[str] = ...) -> None: ...

class ListPipelines(_message.Message):
    __slots__ = ("metadata", "page", "state")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    page: _common_pb2.PageRequest
    state: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., state: _Optional[str] = ...) -> None: ...

class ListPipelinesReply(_message.Message):
    __slots__ = ("pipelines", "page")
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    pipelines: _containers.RepeatedCompositeFieldContainer[Pipeline]
    page: _common_pb2.PageInfo
    def __init__(self, pipelines: _Optional[_Iterable[_Union[Pipeline, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageInfo, _Mapping]] = ...) -> None: ...

class GetCollection(_message.Message):
    __slots__ = ("metadata", "collection_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    collection_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., collection_id: _Optional[str] = ...) -> None: ...

class ListCollections(_message.Message):
    __slots__ = ("metadata", "page", "pipeline_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    page: _common_pb2.PageRequest
    pipeline_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., pipeline_id: _Optional[str] = ...) -> None: ...

class ListCollectionsReply(_message.Message):
    __slots__ = ("collections", "page")
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[Collection]
    page: _common_pb2.PageInfo
    def __init__(self, collections: _Optional[_Iterable[_Union[Collection, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageInfo, _Mapping]] = ...) -> None: ...

class CollectionCounts(_message.Message):
    __slots__ = ("total", "waiting", "active", "succeeded", "failed", "cancelled", "uncertain", "carried")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    UNCERTAIN_FIELD_NUMBER: _ClassVar[int]
    CARRIED_FIELD_NUMBER: _ClassVar[int]
    total: int
    waiting: int
    active: int
    succeeded: int
    failed: int
    cancelled: int
    uncertain: int
    carried: int
    def __init__(self, total: _Optional[int] = ..., waiting: _Optional[int] = ..., active: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., uncertain: _Optional[int] = ..., carried: _Optional[int] = ...) -> None: ...

class CollectionItem(_message.Message):
    __slots__ = ("index", "parameters", "state", "run_id", "launch_key", "run_outcome", "reason_code", "message", "output_commit", "started_at", "ended_at", "carried_from", "revision", "pinned_commit")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_COMMIT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    CARRIED_FROM_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PINNED_COMMIT_FIELD_NUMBER: _ClassVar[int]
    index: int
    parameters: _containers.ScalarMap[str, str]
    state: str
    run_id: str
    launch_key: str
    run_outcome: str
    reason_code: str
    message: str
    output_commit: str
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    carried_from: str
    revision: int
    pinned_commit: str
    def __init__(self, index: _Optional[int] = ..., parameters: _Optional[_Mapping[str, str]] = ..., state: _Optional[str] = ..., run_id: _Optional[str] = ..., launch_key: _Optional[str] = ..., run_outcome: _Optional[str] = ..., reason_code: _Optional[str] = ..., message: _Optional[str] = ..., output_commit: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., carried_from: _Optional[str] = ..., revision: _Optional[int] = ..., pinned_commit: _Optional[str] = ...) -> None: ...

class Collection(_message.Message):
    __slots__ = ("collection_id", "project", "pipeline_id", "step_index", "action", "workload_id", "revision", "pinned_commit", "state", "max_active", "fail_fast", "array", "array_decision", "counts", "items", "reason_code", "message", "cancelled_by", "cancel_reason")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PINNED_COMMIT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    FAIL_FAST_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    ARRAY_DECISION_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_BY_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REASON_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    project: str
    pipeline_id: str
    step_index: int
    action: str
    workload_id: str
    revision: int
    pinned_commit: str
    state: str
    max_active: int
    fail_fast: bool
    array: str
    array_decision: str
    counts: CollectionCounts
    items: _containers.RepeatedCompositeFieldContainer[CollectionItem]
    reason_code: str
    message: str
    cancelled_by: str
    cancel_reason: str
    def __init__(self, collection_id: _Optional[str] = ..., project: _Optional[str] = ..., pipeline_id: _Optional[str] = ..., step_index: _Optional[int] = ..., action: _Optional[str] = ..., workload_id: _Optional[str] = ..., revision: _Optional[int] = ..., pinned_commit: _Optional[str] = ..., state: _Optional[str] = ..., max_active: _Optional[int] = ..., fail_fast: _Optional[bool] = ..., array: _Optional[str] = ..., array_decision: _Optional[str] = ..., counts: _Optional[_Union[CollectionCounts, _Mapping]] = ..., items: _Optional[_Iterable[_Union[CollectionItem, _Mapping]]] = ..., reason_code: _Optional[str] = ..., message: _Optional[str] = ..., cancelled_by: _Optional[str] = ..., cancel_reason: _Optional[str] = ...) -> None: ...

class PipelineStep(_message.Message):
    __slots__ = ("index", "action", "workload_id", "prepared_revision", "revision", "family", "environment", "service_kind", "state", "pinned_commit", "run_id", "launch_key", "launch_command_id", "run_outcome", "reason_code", "message", "output_commit", "endpoint", "launch_attempt", "started_at", "ended_at", "needs", "when", "carried_from", "collection_id", "collection_counts")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    PREPARED_REVISION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PINNED_COMMIT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_KEY_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_COMMIT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FIELD_NUMBER: _ClassVar[int]
    WHEN_FIELD_NUMBER: _ClassVar[int]
    CARRIED_FROM_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_COUNTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    action: str
    workload_id: str
    prepared_revision: int
    revision: int
    family: str
    environment: str
    service_kind: str
    state: str
    pinned_commit: str
    run_id: str
    launch_key: str
    launch_command_id: str
    run_outcome: str
    reason_code: str
    message: str
    output_commit: str
    endpoint: str
    launch_attempt: int
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    needs: _containers.RepeatedScalarFieldContainer[int]
    when: str
    carried_from: str
    collection_id: str
    collection_counts: CollectionCounts
    def __init__(self, index: _Optional[int] = ..., action: _Optional[str] = ..., workload_id: _Optional[str] = ..., prepared_revision: _Optional[int] = ..., revision: _Optional[int] = ..., family: _Optional[str] = ..., environment: _Optional[str] = ..., service_kind: _Optional[str] = ..., state: _Optional[str] = ..., pinned_commit: _Optional[str] = ..., run_id: _Optional[str] = ..., launch_key: _Optional[str] = ..., launch_command_id: _Optional[str] = ..., run_outcome: _Optional[str] = ..., reason_code: _Optional[str] = ..., message: _Optional[str] = ..., output_commit: _Optional[str] = ..., endpoint: _Optional[str] = ..., launch_attempt: _Optional[int] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., needs: _Optional[_Iterable[int]] = ..., when: _Optional[str] = ..., carried_from: _Optional[str] = ..., collection_id: _Optional[str] = ..., collection_counts: _Optional[_Union[CollectionCounts, _Mapping]] = ...) -> None: ...

class StepCounts(_message.Message):
    __slots__ = ("total", "waiting", "active", "succeeded", "failed", "cancelled", "skipped")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    total: int
    waiting: int
    active: int
    succeeded: int
    failed: int
    cancelled: int
    skipped: int
    def __init__(self, total: _Optional[int] = ..., waiting: _Optional[int] = ..., active: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., skipped: _Optional[int] = ...) -> None: ...

class Pipeline(_message.Message):
    __slots__ = ("pipeline_id", "project", "initiating_member", "repository_url", "branch", "requested_actions", "state", "desired_state", "prepared_commit", "failed_step", "reason_code", "message", "steps", "start_command_id", "stopped_by", "stop_reason", "created_at", "updated_at", "ended_at", "version", "last_error", "request_round", "max_active", "rerun_of", "counts", "partial")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    INITIATING_MEMBER_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DESIRED_STATE_FIELD_NUMBER: _ClassVar[int]
    PREPARED_COMMIT_FIELD_NUMBER: _ClassVar[int]
    FAILED_STEP_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    START_COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    STOPPED_BY_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUND_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    RERUN_OF_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    project: str
    initiating_member: str
    repository_url: str
    branch: str
    requested_actions: _containers.RepeatedScalarFieldContainer[str]
    state: str
    desired_state: str
    prepared_commit: str
    failed_step: int
    reason_code: str
    message: str
    steps: _containers.RepeatedCompositeFieldContainer[PipelineStep]
    start_command_id: str
    stopped_by: str
    stop_reason: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    version: int
    last_error: str
    request_round: int
    max_active: int
    rerun_of: str
    counts: StepCounts
    partial: bool
    def __init__(self, pipeline_id: _Optional[str] = ..., project: _Optional[str] = ..., initiating_member: _Optional[str] = ..., repository_url: _Optional[str] = ..., branch: _Optional[str] = ..., requested_actions: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ..., desired_state: _Optional[str] = ..., prepared_commit: _Optional[str] = ..., failed_step: _Optional[int] = ..., reason_code: _Optional[str] = ..., message: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[PipelineStep, _Mapping]]] = ..., start_command_id: _Optional[str] = ..., stopped_by: _Optional[str] = ..., stop_reason: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., last_error: _Optional[str] = ..., request_round: _Optional[int] = ..., max_active: _Optional[int] = ..., rerun_of: _Optional[str] = ..., counts: _Optional[_Union[StepCounts, _Mapping]] = ..., partial: _Optional[bool] = ...) -> None: ...

class PipelineCompleted(_message.Message):
    __slots__ = ("pipeline_id", "project", "outcome", "failed_step", "failed_action", "reason_code", "initiating_member", "steps", "counts", "partial", "rerun_of")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FAILED_STEP_FIELD_NUMBER: _ClassVar[int]
    FAILED_ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    INITIATING_MEMBER_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    RERUN_OF_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    project: str
    outcome: str
    failed_step: int
    failed_action: str
    reason_code: str
    initiating_member: str
    steps: _containers.RepeatedCompositeFieldContainer[PipelineStep]
    counts: StepCounts
    partial: bool
    rerun_of: str
    def __init__(self, pipeline_id: _Optional[str] = ..., project: _Optional[str] = ..., outcome: _Optional[str] = ..., failed_step: _Optional[int] = ..., failed_action: _Optional[str] = ..., reason_code: _Optional[str] = ..., initiating_member: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[PipelineStep, _Mapping]]] = ..., counts: _Optional[_Union[StepCounts, _Mapping]] = ..., partial: _Optional[bool] = ..., rerun_of: _Optional[str] = ...) -> None: ...

class CollectionCompleted(_message.Message):
    __slots__ = ("collection_id", "project", "pipeline_id", "step_index", "action", "outcome", "counts")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    project: str
    pipeline_id: str
    step_index: int
    action: str
    outcome: str
    counts: CollectionCounts
    def __init__(self, collection_id: _Optional[str] = ..., project: _Optional[str] = ..., pipeline_id: _Optional[str] = ..., step_index: _Optional[int] = ..., action: _Optional[str] = ..., outcome: _Optional[str] = ..., counts: _Optional[_Union[CollectionCounts, _Mapping]] = ...) -> None: ...

class ListAuditRecords(_message.Message):
    __slots__ = ("metadata", "filter")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    filter: _common_pb2.AuditFilter
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., filter: _Optional[_Union[_common_pb2.AuditFilter, _Mapping]] = ...) -> None: ...
