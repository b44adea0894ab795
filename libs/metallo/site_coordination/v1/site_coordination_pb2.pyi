from metallo.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AppendSiteCommand(_message.Message):
    __slots__ = ("metadata", "site_id", "environment", "kind", "run_id", "attempt_id", "attempt_number", "payload_json", "after_command_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    AFTER_COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    site_id: str
    environment: str
    kind: str
    run_id: str
    attempt_id: str
    attempt_number: int
    payload_json: str
    after_command_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., site_id: _Optional[str] = ..., environment: _Optional[str] = ..., kind: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., attempt_number: _Optional[int] = ..., payload_json: _Optional[str] = ..., after_command_id: _Optional[str] = ...) -> None: ...

class AppendSiteCommandReply(_message.Message):
    __slots__ = ("command_id", "site_id", "environment", "sequence")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    site_id: str
    environment: str
    sequence: int
    def __init__(self, command_id: _Optional[str] = ..., site_id: _Optional[str] = ..., environment: _Optional[str] = ..., sequence: _Optional[int] = ...) -> None: ...

class SiteCommandAppended(_message.Message):
    __slots__ = ("command_id", "site_id", "environment", "sequence", "kind", "run_id", "attempt_id")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    site_id: str
    environment: str
    sequence: int
    kind: str
    run_id: str
    attempt_id: str
    def __init__(self, command_id: _Optional[str] = ..., site_id: _Optional[str] = ..., environment: _Optional[str] = ..., sequence: _Optional[int] = ..., kind: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt_id: _Optional[str] = ...) -> None: ...

class SiteCommandResultRecorded(_message.Message):
    __slots__ = ("command_id", "site_id", "environment", "sequence", "kind", "run_id", "attempt_id", "result_json")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    site_id: str
    environment: str
    sequence: int
    kind: str
    run_id: str
    attempt_id: str
    result_json: str
    def __init__(self, command_id: _Optional[str] = ..., site_id: _Optional[str] = ..., environment: _Optional[str] = ..., sequence: _Optional[int] = ..., kind: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., result_json: _Optional[str] = ...) -> None: ...

class SiteProgressReported(_message.Message):
    __slots__ = ("command_id", "site_id", "sequence", "code", "run_id", "attempt_id")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    site_id: str
    sequence: int
    code: str
    run_id: str
    attempt_id: str
    def __init__(self, command_id: _Optional[str] = ..., site_id: _Optional[str] = ..., sequence: _Optional[int] = ..., code: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt_id: _Optional[str] = ...) -> None: ...

class SiteNativeEndNoticed(_message.Message):
    __slots__ = ("site_id", "environment", "run_id", "attempt_id")
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    site_id: str
    environment: str
    run_id: str
    attempt_id: str
    def __init__(self, site_id: _Optional[str] = ..., environment: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt_id: _Optional[str] = ...) -> None: ...

class CommandGrant(_message.Message):
    __slots__ = ("grant_id", "site_id", "environment", "label", "created_at", "expires_at", "revoked_at")
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    site_id: str
    environment: str
    label: str
    created_at: str
    expires_at: str
    revoked_at: str
    def __init__(self, grant_id: _Optional[str] = ..., site_id: _Optional[str] = ..., environment: _Optional[str] = ..., label: _Optional[str] = ..., created_at: _Optional[str] = ..., expires_at: _Optional[str] = ..., revoked_at: _Optional[str] = ...) -> None: ...

class CreateCommandGrant(_message.Message):
    __slots__ = ("metadata", "site_id", "environment", "expires", "label", "secret_sha256")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SITE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SECRET_SHA256_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    site_id: str
    environment: str
    expires: str
    label: str
    secret_sha256: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., site_id: _Optional[str] = ..., environment: _Optional[str] = ..., expires: _Optional[str] = ..., label: _Optional[str] = ..., secret_sha256: _Optional[str] = ...) -> None: ...

class CreateCommandGrantReply(_message.Message):
    __slots__ = ("grant",)
    GRANT_FIELD_NUMBER: _ClassVar[int]
    grant: CommandGrant
    def __init__(self, grant: _Optional[_Union[CommandGrant, _Mapping]] = ...) -> None: ...

class RevokeCommandGrant(_message.Message):
    __slots__ = ("metadata", "grant_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    grant_id: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., grant_id: _Optional[str] = ...) -> None: ...

class RevokeCommandGrantReply(_message.Message):
    __slots__ = ("grant_id", "revoked")
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    revoked: bool
    def __init__(self, grant_id: _Optional[str] = ..., revoked: _Optional[bool] = ...) -> None: ...

class ListCommandGrants(_message.Message):
    __slots__ = ("metadata",)
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ...) -> None: ...

class ListCommandGrantsReply(_message.Message):
    __slots__ = ("grants",)
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[CommandGrant]
    def __init__(self, grants: _Optional[_Iterable[_Union[CommandGrant, _Mapping]]] = ...) -> None: ...

class ListAuditRecords(_message.Message):
    __slots__ = ("metadata", "filter")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    filter: _common_pb2.AuditFilter
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., filter: _Optional[_Union[_common_pb2.AuditFilter, _Mapping]] = ...) -> None: ...
