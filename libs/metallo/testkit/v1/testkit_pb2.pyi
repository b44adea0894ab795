from metallo.common.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Deposit(_message.Message):
    __slots__ = ("metadata", "account", "amount")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.CommandMetadata
    account: str
    amount: int
    def __init__(self, metadata: _Optional[_Union[_common_pb2.CommandMetadata, _Mapping]] = ..., account: _Optional[str] = ..., amount: _Optional[int] = ...) -> None: ...

class DepositReply(_message.Message):
    __slots__ = ("account", "balance")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    BALANCE_FIELD_NUMBER: _ClassVar[int]
    account: str
    balance: int
    def __init__(self, account: _Optional[str] = ..., balance: _Optional[int] = ...) -> None: ...

class GetBalance(_message.Message):
    __slots__ = ("metadata", "account")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.QueryMetadata
    account: str
    def __init__(self, metadata: _Optional[_Union[_common_pb2.QueryMetadata, _Mapping]] = ..., account: _Optional[str] = ...) -> None: ...

class Balance(_message.Message):
    __slots__ = ("account", "balance")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    BALANCE_FIELD_NUMBER: _ClassVar[int]
    account: str
    balance: int
    def __init__(self, account: _Optional[str] = ..., balance: _Optional[int] = ...) -> None: ...

class Deposited(_message.Message):
    __slots__ = ("account", "amount", "sequence")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    account: str
    amount: int
    sequence: int
    def __init__(self, account: _Optional[str] = ..., amount: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...
