import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from metallo.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrepareAction(_message.Message):
    __slots__ = ("metadata", "repository_url", "branch", "commit", "action")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    repository_url: str
    branch: str
    commit: str
    action: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., repository_url: _Optional[str] = ..., branch: _Optional[str] = ..., commit: _Optional[str] = ..., action: _Optional[str] = ...) -> None: ...

class PrepareActionReply(_message.Message):
    __slots__ = ("workload_id", "revision", "commit", "family", "environment", "action_type", "service_kind", "spec_digest", "created", "action")
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    workload_id: str
    revision: int
    commit: str
    family: str
    environment: str
    action_type: str
    service_kind: str
    spec_digest: str
    created: bool
    action: str
    def __init__(self, workload_id: _Optional[str] = ..., revision: _Optional[int] = ..., commit: _Optional[str] = ..., family: _Optional[str] = ..., environment: _Optional[str] = ..., action_type: _Optional[str] = ..., service_kind: _Optional[str] = ..., spec_digest: _Optional[str] = ..., created: _Optional[bool] = ..., action: _Optional[str] = ...) -> None: ...

class PrepareBranch(_message.Message):
    __slots__ = ("metadata", "repository_url", "branch", "commit")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    repository_url: str
    branch: str
    commit: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., repository_url: _Optional[str] = ..., branch: _Optional[str] = ..., commit: _Optional[str] = ...) -> None: ...

class PreparedAction(_message.Message):
    __slots__ = ("action", "workload_id", "revision", "commit", "family", "environment", "action_type", "service_kind", "spec_digest", "created", "needs", "when", "collection")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FIELD_NUMBER: _ClassVar[int]
    WHEN_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    action: str
    workload_id: str
    revision: int
    commit: str
    family: str
    environment: str
    action_type: str
    service_kind: str
    spec_digest: str
    created: bool
    needs: _containers.RepeatedScalarFieldContainer[str]
    when: str
    collection: CollectionShape
    def __init__(self, action: _Optional[str] = ..., workload_id: _Optional[str] = ..., revision: _Optional[int] = ..., commit: _Optional[str] = ..., family: _Optional[str] = ..., environment: _Optional[str] = ..., action_type: _Optional[str] = ..., service_kind: _Optional[str] = ..., spec_digest: _Optional[str] = ..., created: _Optional[bool] = ..., needs: _Optional[_Iterable[str]] = ..., when: _Optional[str] = ..., collection: _Optional[_Union[CollectionShape, _Mapping]] = ...) -> None: ...

class ParameterAxis(_message.Message):
    __slots__ = ("name", "values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., values: _Optional[_Iterable[str]] = ...) -> None: ...

class ParameterRecord(_message.Message):
    __slots__ = ("values",)
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.ScalarMap[str, str]
    def __init__(self, values: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CollectionShape(_message.Message):
    __slots__ = ("matrix", "parameters", "max_active", "fail_fast", "array")
    MATRIX_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    FAIL_FAST_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    matrix: _containers.RepeatedCompositeFieldContainer[ParameterAxis]
    parameters: _containers.RepeatedCompositeFieldContainer[ParameterRecord]
    max_active: int
    fail_fast: bool
    array: str
    def __init__(self, matrix: _Optional[_Iterable[_Union[ParameterAxis, _Mapping]]] = ..., parameters: _Optional[_Iterable[_Union[ParameterRecord, _Mapping]]] = ..., max_active: _Optional[int] = ..., fail_fast: _Optional[bool] = ..., array: _Optional[str] = ...) -> None: ...

class PrepareBranchReply(_message.Message):
    __slots__ = ("actions", "commit")
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedCompositeFieldContainer[PreparedAction]
    commit: str
    def __init__(self, actions: _Optional[_Iterable[_Union[PreparedAction, _Mapping]]] = ..., commit: _Optional[str] = ...) -> None: ...

class GetWorkloadRevision(_message.Message):
    __slots__ = ("metadata", "workload_id", "revision")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    workload_id: str
    revision: int
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., workload_id: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class WorkloadRevision(_message.Message):
    __slots__ = ("workload_id", "project", "repository_url", "action", "action_type", "family", "environment", "service_kind", "revision", "commit", "branch", "spec_json", "spec_digest", "created_at")
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    workload_id: str
    project: str
    repository_url: str
    action: str
    action_type: str
    family: str
    environment: str
    service_kind: str
    revision: int
    commit: str
    branch: str
    spec_json: str
    spec_digest: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, workload_id: _Optional[str] = ..., project: _Optional[str] = ..., repository_url: _Optional[str] = ..., action: _Optional[str] = ..., action_type: _Optional[str] = ..., family: _Optional[str] = ..., environment: _Optional[str] = ..., service_kind: _Optional[str] = ..., revision: _Optional[int] = ..., commit: _Optional[str] = ..., branch: _Optional[str] = ..., spec_json: _Optional[str] = ..., spec_digest: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListWorkloads(_message.Message):
    __slots__ = ("metadata", "page", "repository_url")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    page: _common_pb2.PageRequest
    repository_url: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ..., repository_url: _Optional[str] = ...) -> None: ...

class WorkloadSummary(_message.Message):
    __slots__ = ("workload_id", "project", "repository_url", "action", "action_type", "family", "environment", "service_kind", "latest_revision", "latest_commit", "latest_spec_digest", "created_at", "updated_at")
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    LATEST_REVISION_FIELD_NUMBER: _ClassVar[int]
    LATEST_COMMIT_FIELD_NUMBER: _ClassVar[int]
    LATEST_SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    workload_id: str
    project: str
    repository_url: str
    action: str
    action_type: str
    family: str
    environment: str
    service_kind: str
    latest_revision: int
    latest_commit: str
    latest_spec_digest: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, workload_id: _Optional[str] = ..., project: _Optional[str] = ..., repository_url: _Optional[str] = ..., action: _Optional[str] = ..., action_type: _Optional[str] = ..., family: _Optional[str] = ..., environment: _Optional[str] = ..., service_kind: _Optional[str] = ..., latest_revision: _Optional[int] = ..., latest_commit: _Optional[str] = ..., latest_spec_digest: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListWorkloadsReply(_message.Message):
    __slots__ = ("workloads", "page")
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    workloads: _containers.RepeatedCompositeFieldContainer[WorkloadSummary]
    page: _common_pb2.PageInfo
    def __init__(self, workloads: _Optional[_Iterable[_Union[WorkloadSummary, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageInfo, _Mapping]] = ...) -> None: ...

class ListBranches(_message.Message):
    __slots__ = ("metadata", "repository_url")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    repository_url: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., repository_url: _Optional[str] = ...) -> None: ...

class Branch(_message.Message):
    __slots__ = ("name", "commit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    commit: str
    def __init__(self, name: _Optional[str] = ..., commit: _Optional[str] = ...) -> None: ...

class ListBranchesReply(_message.Message):
    __slots__ = ("branches", "default_branch", "truncated")
    BRANCHES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_BRANCH_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    branches: _containers.RepeatedCompositeFieldContainer[Branch]
    default_branch: str
    truncated: bool
    def __init__(self, branches: _Optional[_Iterable[_Union[Branch, _Mapping]]] = ..., default_branch: _Optional[str] = ..., truncated: _Optional[bool] = ...) -> None: ...

class WorkloadRevisionCreated(_message.Message):
    __slots__ = ("workload_id", "project", "repository_url", "action", "revision", "commit", "branch", "family", "environment", "action_type", "service_kind", "spec_digest", "acting_member", "created_at")
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ACTING_MEMBER_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    workload_id: str
    project: str
    repository_url: str
    action: str
    revision: int
    commit: str
    branch: str
    family: str
    environment: str
    action_type: str
    service_kind: str
    spec_digest: str
    acting_member: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, workload_id: _Optional[str] = ..., project: _Optional[str] = ..., repository_url: _Optional[str] = ..., action: _Optional[str] = ..., revision: _Optional[int] = ..., commit: _Optional[str] = ..., branch: _Optional[str] = ..., family: _Optional[str] = ..., environment: _Optional[str] = ..., action_type: _Optional[str] = ..., service_kind: _Optional[str] = ..., spec_digest: _Optional[str] = ..., acting_member: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
