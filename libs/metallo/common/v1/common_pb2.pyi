from google.protobuf import any_pb2 as _any_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommandMetadata(_message.Message):
    __slots__ = ("command_id", "acting_member", "project", "expected_version")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    ACTING_MEMBER_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    acting_member: str
    project: str
    expected_version: int
    def __init__(self, command_id: _Optional[str] = ..., acting_member: _Optional[str] = ..., project: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class QueryMetadata(_message.Message):
    __slots__ = ("acting_member", "project")
    ACTING_MEMBER_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    acting_member: str
    project: str
    def __init__(self, acting_member: _Optional[str] = ..., project: _Optional[str] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("code", "message", "details")
    class DetailsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    details: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., details: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("accepted", "rejected")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    accepted: _any_pb2.Any
    rejected: Rejection
    def __init__(self, accepted: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., rejected: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class PageRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class PageInfo(_message.Message):
    __slots__ = ("next_page_token",)
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    def __init__(self, next_page_token: _Optional[str] = ...) -> None: ...

class AuditFilter(_message.Message):
    __slots__ = ("since", "actor", "page")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    since: str
    actor: str
    page: PageRequest
    def __init__(self, since: _Optional[str] = ..., actor: _Optional[str] = ..., page: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("record_id", "service", "recorded_at", "actor", "principal", "project", "action", "affected", "request_id", "correlation_id", "decision", "code", "summary_json", "cursor")
    class AffectedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    RECORDED_AT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    AFFECTED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_JSON_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    service: str
    recorded_at: str
    actor: str
    principal: str
    project: str
    action: str
    affected: _containers.ScalarMap[str, str]
    request_id: str
    correlation_id: str
    decision: str
    code: str
    summary_json: str
    cursor: str
    def __init__(self, record_id: _Optional[str] = ..., service: _Optional[str] = ..., recorded_at: _Optional[str] = ..., actor: _Optional[str] = ..., principal: _Optional[str] = ..., project: _Optional[str] = ..., action: _Optional[str] = ..., affected: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., decision: _Optional[str] = ..., code: _Optional[str] = ..., summary_json: _Optional[str] = ..., cursor: _Optional[str] = ...) -> None: ...

class AuditRecords(_message.Message):
    __slots__ = ("records", "page")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    page: PageInfo
    def __init__(self, records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., page: _Optional[_Union[PageInfo, _Mapping]] = ...) -> None: ...
