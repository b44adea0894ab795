import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from metallo.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LaunchRun(_message.Message):
    __slots__ = ("metadata", "workload_id", "revision", "launch_key", "labels", "repository_commit", "parameters", "array_group")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_KEY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_COMMIT_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    ARRAY_GROUP_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    workload_id: str
    revision: int
    launch_key: str
    labels: _containers.ScalarMap[str, str]
    repository_commit: str
    parameters: _containers.ScalarMap[str, str]
    array_group: ArrayGroup
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., workload_id: _Optional[str] = ..., revision: _Optional[int] = ..., launch_key: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., repository_commit: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ..., array_group: _Optional[_Union[ArrayGroup, _Mapping]] = ...) -> None: ...

class ArrayGroup(_message.Message):
    __slots__ = ("group_id", "size", "index", "max_active", "mode")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    size: int
    index: int
    max_active: int
    mode: str
    def __init__(self, group_id: _Optional[str] = ..., size: _Optional[int] = ..., index: _Optional[int] = ..., max_active: _Optional[int] = ..., mode: _Optional[str] = ...) -> None: ...

class LaunchRunReply(_message.Message):
    __slots__ = ("run_id", "phase", "version")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    phase: str
    version: int
    def __init__(self, run_id: _Optional[str] = ..., phase: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class RerunRun(_message.Message):
    __slots__ = ("metadata", "run_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    run_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., run_id: _Optional[str] = ...) -> None: ...

class RerunRunReply(_message.Message):
    __slots__ = ("run_id", "phase", "version", "rerun_of", "revision", "repository_commit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RERUN_OF_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_COMMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    phase: str
    version: int
    rerun_of: str
    revision: int
    repository_commit: str
    def __init__(self, run_id: _Optional[str] = ..., phase: _Optional[str] = ..., version: _Optional[int] = ..., rerun_of: _Optional[str] = ..., revision: _Optional[int] = ..., repository_commit: _Optional[str] = ...) -> None: ...

class CancelRun(_message.Message):
    __slots__ = ("metadata", "run_id", "reason")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    run_id: str
    reason: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunReply(_message.Message):
    __slots__ = ("run_id", "cancel_recorded", "desired_state", "phase", "outcome", "version")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RECORDED_FIELD_NUMBER: _ClassVar[int]
    DESIRED_STATE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    cancel_recorded: bool
    desired_state: str
    phase: str
    outcome: str
    version: int
    def __init__(self, run_id: _Optional[str] = ..., cancel_recorded: _Optional[bool] = ..., desired_state: _Optional[str] = ..., phase: _Optional[str] = ..., outcome: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ReconcileRun(_message.Message):
    __slots__ = ("metadata", "run_id", "decision", "dry_run", "reason")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    run_id: str
    decision: str
    dry_run: bool
    reason: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., run_id: _Optional[str] = ..., decision: _Optional[str] = ..., dry_run: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ReconcileRunReply(_message.Message):
    __slots__ = ("run_id", "decision", "dry_run", "eligible", "recorded", "explanation", "attempt_number", "will_retry", "phase", "outcome", "version")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    WILL_RETRY_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    decision: str
    dry_run: bool
    eligible: bool
    recorded: bool
    explanation: str
    attempt_number: int
    will_retry: bool
    phase: str
    outcome: str
    version: int
    def __init__(self, run_id: _Optional[str] = ..., decision: _Optional[str] = ..., dry_run: _Optional[bool] = ..., eligible: _Optional[bool] = ..., recorded: _Optional[bool] = ..., explanation: _Optional[str] = ..., attempt_number: _Optional[int] = ..., will_retry: _Optional[bool] = ..., phase: _Optional[str] = ..., outcome: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetRun(_message.Message):
    __slots__ = ("metadata", "run_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    run_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., run_id: _Optional[str] = ...) -> None: ...

class ListRuns(_message.Message):
    __slots__ = ("metadata", "page", "workload_id", "phase", "outcome", "active_only")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ONLY_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    page: _common_pb2.PageRequest
    workload_id: str
    phase: str
    outcome: str
    active_only: bool
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., workload_id: _Optional[str] = ..., phase: _Optional[str] = ..., outcome: _Optional[str] = ..., active_only: _Optional[bool] = ...) -> None: ...

class ListRunsReply(_message.Message):
    __slots__ = ("runs", "page")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    page: _common_pb2.PageInfo
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageInfo, _Mapping]] = ...) -> None: ...

class NativeJob(_message.Message):
    __slots__ = ("stage", "job_id")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    stage: str
    job_id: str
    def __init__(self, stage: _Optional[str] = ..., job_id: _Optional[str] = ...) -> None: ...

class PinnedRepository(_message.Message):
    __slots__ = ("role", "url", "commit", "branch")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    role: str
    url: str
    commit: str
    branch: str
    def __init__(self, role: _Optional[str] = ..., url: _Optional[str] = ..., commit: _Optional[str] = ..., branch: _Optional[str] = ...) -> None: ...

class ExitFacts(_message.Message):
    __slots__ = ("exit_code", "signal", "failure_stage", "failure_code", "scheduler_state")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    FAILURE_STAGE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CODE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_STATE_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    signal: int
    failure_stage: str
    failure_code: str
    scheduler_state: str
    def __init__(self, exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., failure_stage: _Optional[str] = ..., failure_code: _Optional[str] = ..., scheduler_state: _Optional[str] = ...) -> None: ...

class Transition(_message.Message):
    __slots__ = ("version", "phase", "desired_state", "observation_phase", "outcome", "reason_code", "attempt_number", "at")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DESIRED_STATE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_PHASE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    version: int
    phase: str
    desired_state: str
    observation_phase: str
    outcome: str
    reason_code: str
    attempt_number: int
    at: _timestamp_pb2.Timestamp
    def __init__(self, version: _Optional[int] = ..., phase: _Optional[str] = ..., desired_state: _Optional[str] = ..., observation_phase: _Optional[str] = ..., outcome: _Optional[str] = ..., reason_code: _Optional[str] = ..., attempt_number: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt_id", "number", "state", "material_digest", "native_jobs", "native_state", "observation_phase", "exit", "reason_code", "created_at", "started_at", "ended_at", "dispatch_deadline")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MATERIAL_DIGEST_FIELD_NUMBER: _ClassVar[int]
    NATIVE_JOBS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_STATE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_PHASE_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    number: int
    state: str
    material_digest: str
    native_jobs: _containers.RepeatedCompositeFieldContainer[NativeJob]
    native_state: str
    observation_phase: str
    exit: ExitFacts
    reason_code: str
    created_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    dispatch_deadline: _timestamp_pb2.Timestamp
    def __init__(self, attempt_id: _Optional[str] = ..., number: _Optional[int] = ..., state: _Optional[str] = ..., material_digest: _Optional[str] = ..., native_jobs: _Optional[_Iterable[_Union[NativeJob, _Mapping]]] = ..., native_state: _Optional[str] = ..., observation_phase: _Optional[str] = ..., exit: _Optional[_Union[ExitFacts, _Mapping]] = ..., reason_code: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dispatch_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "project", "workload_id", "revision", "action", "action_type", "environment", "family", "service_kind", "site_id", "desired_state", "phase", "native_state", "observation_phase", "observation_confidence", "exit", "outcome", "reason_code", "initiating_member", "launch_command_id", "launch_key", "labels", "attempts", "repositories", "output_commit", "endpoint", "spec_digest", "cancel_reason", "cancelled_by", "accepted_at", "planned_at", "started_at", "ended_at", "updated_at", "version", "max_attempts", "history", "reason_message", "waiting_reason", "native_wait", "native_stage", "rerun_of", "parameters", "array_start")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    SERVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    DESIRED_STATE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    NATIVE_STATE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_PHASE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    INITIATING_MEMBER_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_KEY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REPOSITORIES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_COMMIT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REASON_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_BY_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_AT_FIELD_NUMBER: _ClassVar[int]
    PLANNED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    REASON_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    NATIVE_WAIT_FIELD_NUMBER: _ClassVar[int]
    NATIVE_STAGE_FIELD_NUMBER: _ClassVar[int]
    RERUN_OF_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    ARRAY_START_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    project: str
    workload_id: str
    revision: int
    action: str
    action_type: str
    environment: str
    family: str
    service_kind: str
    site_id: str
    desired_state: str
    phase: str
    native_state: str
    observation_phase: str
    observation_confidence: str
    exit: ExitFacts
    outcome: str
    reason_code: str
    initiating_member: str
    launch_command_id: str
    launch_key: str
    labels: _containers.ScalarMap[str, str]
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    repositories: _containers.RepeatedCompositeFieldContainer[PinnedRepository]
    output_commit: str
    endpoint: str
    spec_digest: str
    cancel_reason: str
    cancelled_by: str
    accepted_at: _timestamp_pb2.Timestamp
    planned_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    version: int
    max_attempts: int
    history: _containers.RepeatedCompositeFieldContainer[Transition]
    reason_message: str
    waiting_reason: str
    native_wait: str
    native_stage: str
    rerun_of: str
    parameters: _containers.ScalarMap[str, str]
    array_start: str
    def __init__(self, run_id: _Optional[str] = ..., project: _Optional[str] = ..., workload_id: _Optional[str] = ..., revision: _Optional[int] = ..., action: _Optional[str] = ..., action_type: _Optional[str] = ..., environment: _Optional[str] = ..., family: _Optional[str] = ..., service_kind: _Optional[str] = ..., site_id: _Optional[str] = ..., desired_state: _Optional[str] = ..., phase: _Optional[str] = ..., native_state: _Optional[str] = ..., observation_phase: _Optional[str] = ..., observation_confidence: _Optional[str] = ..., exit: _Optional[_Union[ExitFacts, _Mapping]] = ..., outcome: _Optional[str] = ..., reason_code: _Optional[str] = ..., initiating_member: _Optional[str] = ..., launch_command_id: _Optional[str] = ..., launch_key: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., repositories: _Optional[_Iterable[_Union[PinnedRepository, _Mapping]]] = ..., output_commit: _Optional[str] = ..., endpoint: _Optional[str] = ..., spec_digest: _Optional[str] = ..., cancel_reason: _Optional[str] = ..., cancelled_by: _Optional[str] = ..., accepted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., planned_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., max_attempts: _Optional[int] = ..., history: _Optional[_Iterable[_Union[Transition, _Mapping]]] = ..., reason_message: _Optional[str] = ..., waiting_reason: _Optional[str] = ..., native_wait: _Optional[str] = ..., native_stage: _Optional[str] = ..., rerun_of: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ..., array_start: _Optional[str] = ...) -> None: ...

class RunAccepted(_message.Message):
    __slots__ = ("run_id", "project", "workload_id", "revision", "initiating_member", "launch_command_id", "launch_key", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    INITIATING_MEMBER_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_KEY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    project: str
    workload_id: str
    revision: int
    initiating_member: str
    launch_command_id: str
    launch_key: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, run_id: _Optional[str] = ..., project: _Optional[str] = ..., workload_id: _Optional[str] = ..., revision: _Optional[int] = ..., initiating_member: _Optional[str] = ..., launch_command_id: _Optional[str] = ..., launch_key: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ("run_id", "project", "attempt_id", "attempt_number", "site_id", "launch_command_id", "launch_key", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_KEY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    project: str
    attempt_id: str
    attempt_number: int
    site_id: str
    launch_command_id: str
    launch_key: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, run_id: _Optional[str] = ..., project: _Optional[str] = ..., attempt_id: _Optional[str] = ..., attempt_number: _Optional[int] = ..., site_id: _Optional[str] = ..., launch_command_id: _Optional[str] = ..., launch_key: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RunCompleted(_message.Message):
    __slots__ = ("run_id", "project", "outcome", "reason_code", "output_commit", "launch_command_id", "launch_key", "labels", "workload_id", "revision", "attempts", "array_start")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_COMMIT_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_KEY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ARRAY_START_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    project: str
    outcome: str
    reason_code: str
    output_commit: str
    launch_command_id: str
    launch_key: str
    labels: _containers.ScalarMap[str, str]
    workload_id: str
    revision: int
    attempts: int
    array_start: str
    def __init__(self, run_id: _Optional[str] = ..., project: _Optional[str] = ..., outcome: _Optional[str] = ..., reason_code: _Optional[str] = ..., output_commit: _Optional[str] = ..., launch_command_id: _Optional[str] = ..., launch_key: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., workload_id: _Optional[str] = ..., revision: _Optional[int] = ..., attempts: _Optional[int] = ..., array_start: _Optional[str] = ...) -> None: ...

class ReadRunLog(_message.Message):
    __slots__ = ("metadata", "run_id", "attempt_number", "stage", "max_bytes", "offset")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    run_id: str
    attempt_number: int
    stage: str
    max_bytes: int
    offset: int
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., run_id: _Optional[str] = ..., attempt_number: _Optional[int] = ..., stage: _Optional[str] = ..., max_bytes: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ReadRunLogReply(_message.Message):
    __slots__ = ("read_id", "state")
    READ_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    read_id: str
    state: str
    def __init__(self, read_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class GetRunLogRead(_message.Message):
    __slots__ = ("metadata", "read_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    READ_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    read_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., read_id: _Optional[str] = ...) -> None: ...

class RunLogRead(_message.Message):
    __slots__ = ("read_id", "run_id", "attempt_number", "stage", "state", "text", "truncated", "reason_code", "offset", "next_offset", "size", "requested_offset")
    READ_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    read_id: str
    run_id: str
    attempt_number: int
    stage: str
    state: str
    text: str
    truncated: bool
    reason_code: str
    offset: int
    next_offset: int
    size: int
    requested_offset: int
    def __init__(self, read_id: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt_number: _Optional[int] = ..., stage: _Optional[str] = ..., state: _Optional[str] = ..., text: _Optional[str] = ..., truncated: _Optional[bool] = ..., reason_code: _Optional[str] = ..., offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., size: _Optional[int] = ..., requested_offset: _Optional[int] = ...) -> None: ...

class CountActiveRuns(_message.Message):
    __slots__ = ("metadata", "site_id", "attempt_ids")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    site_id: str
    attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., site_id: _Optional[str] = ..., attempt_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CountActiveRunsReply(_message.Message):
    __slots__ = ("active", "lost_after_seconds")
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    LOST_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    active: int
    lost_after_seconds: float
    def __init__(self, active: _Optional[int] = ..., lost_after_seconds: _Optional[float] = ...) -> None: ...

class DrainSite(_message.Message):
    __slots__ = ("metadata", "site_id", "reason")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    site_id: str
    reason: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., site_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainSiteReply(_message.Message):
    __slots__ = ("drain", "already_draining")
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    ALREADY_DRAINING_FIELD_NUMBER: _ClassVar[int]
    drain: SiteDrain
    already_draining: bool
    def __init__(self, drain: _Optional[_Union[SiteDrain, _Mapping]] = ..., already_draining: _Optional[bool] = ...) -> None: ...

class ResumeSite(_message.Message):
    __slots__ = ("metadata", "site_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    site_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., site_id: _Optional[str] = ...) -> None: ...

class ResumeSiteReply(_message.Message):
    __slots__ = ("site_id", "was_draining", "runs_woken")
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    WAS_DRAINING_FIELD_NUMBER: _ClassVar[int]
    RUNS_WOKEN_FIELD_NUMBER: _ClassVar[int]
    site_id: str
    was_draining: bool
    runs_woken: int
    def __init__(self, site_id: _Optional[str] = ..., was_draining: _Optional[bool] = ..., runs_woken: _Optional[int] = ...) -> None: ...

class SiteDrain(_message.Message):
    __slots__ = ("site_id", "drained_by", "drained_at", "reason", "active_runs")
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    DRAINED_BY_FIELD_NUMBER: _ClassVar[int]
    DRAINED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    site_id: str
    drained_by: str
    drained_at: str
    reason: str
    active_runs: int
    def __init__(self, site_id: _Optional[str] = ..., drained_by: _Optional[str] = ..., drained_at: _Optional[str] = ..., reason: _Optional[str] = ..., active_runs: _Optional[int] = ...) -> None: ...

class ListSiteDrains(_message.Message):
    __slots__ = ("metadata",)
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ...) -> None: ...

class ListSiteDrainsReply(_message.Message):
    __slots__ = ("drains",)
    DRAINS_FIELD_NUMBER: _ClassVar[int]
    drains: _containers.RepeatedCompositeFieldContainer[SiteDrain]
    def __init__(self, drains: _Optional[_Iterable[_Union[SiteDrain, _Mapping]]] = ...) -> None: ...

class ListAuditRecords(_message.Message):
    __slots__ = ("metadata", "filter")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    filter: _common_pb2.AuditFilter
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., filter: _Optional[_Union[_common_pb2.AuditFilter, _Mapping]] = ...) -> None: ...
