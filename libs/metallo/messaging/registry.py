"""Message-name registry: fully-qualified protobuf name → generated class.

Generated modules live under ``libs/metallo/<context>/v<N>/*_pb2.py``
(``scripts/gen-proto``); they are imported once, on first lookup or by
:func:`load_all_messages`.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache
from pathlib import Path

from google.protobuf.message import Message

import metallo

_CONTEXT = re.compile(r"[a-z_]+")
_VERSION = re.compile(r"v\d+")
_PACKAGE = re.compile(r"^metallo\.(?P<context>[a-z_]+)\.(?P<version>v\d+)\.(?P<name>[A-Za-z0-9_]+)$")


def _messages_of(modules) -> dict[str, type[Message]]:
    found: dict[str, type[Message]] = {}
    for name in modules:
        module = importlib.import_module(name)
        for desc in module.DESCRIPTOR.message_types_by_name.values():
            found[desc.full_name] = getattr(module, desc.name)
    return found


@lru_cache(maxsize=1)
def _generated() -> dict[tuple[str, str], tuple[str, ...]]:
    """``(context, version)`` → its generated module names, found by listing the
    ``metallo`` package's directories: nothing is imported. Listing instead of
    ``walk_packages``, which imports every package of metallo (SQLAlchemy, jsonschema,
    …), a quarter second per CLI command; and only names found here are ever imported,
    whatever a message's type header says."""
    found: dict[tuple[str, str], list[str]] = {}
    for root in map(Path, metallo.__path__):
        if not root.is_dir():
            continue
        for pb2 in sorted(root.glob("*/v*/*_pb2.py")):
            context, version = pb2.parent.parent.name, pb2.parent.name
            if _CONTEXT.fullmatch(context) and _VERSION.fullmatch(version):
                found.setdefault((context, version), []).append(
                    f"metallo.{context}.{version}.{pb2.stem}")
    return {key: tuple(names) for key, names in found.items()}


@lru_cache(maxsize=1)
def _all_messages() -> dict[str, type[Message]]:
    generated = _generated()
    if not generated:  # not on a plain file system (e.g. a zip): import and walk
        return _messages_of(
            mod.name for mod in pkgutil.walk_packages(metallo.__path__, "metallo.")
            if mod.name.endswith("_pb2"))
    return _messages_of(name for names in generated.values() for name in names)


@lru_cache(maxsize=64)
def _messages_in(context: str, version: str) -> dict[str, type[Message]]:
    """The generated messages of ``metallo.<context>.<version>`` only (empty when there
    is no such generated package)."""
    return _messages_of(_generated().get((context, version), ()))


def load_all_messages() -> int:
    """Import every generated message module now (it happens once); return how many messages are known.

    Consumers call it at start so the first delivery does not pay for the imports.
    """
    return len(_all_messages())


def message_class(full_name: str) -> type[Message] | None:
    """Return the generated class for ``full_name`` or None when unknown.

    Imports only the generated modules of the name's own ``metallo.<context>.v<N>``
    package (a name outside that pattern is unknown)."""
    m = _PACKAGE.match(full_name)
    if not m:
        return None
    if _all_messages.cache_info().currsize:  # a consumer loaded them all at start
        return _all_messages().get(full_name)
    if not _generated():
        return _all_messages().get(full_name)
    return _messages_in(m["context"], m["version"]).get(full_name)


@lru_cache(maxsize=1024)
def parse_name(full_name: str) -> tuple[str, str, str]:
    """Split ``metallo.<context>.v<N>.<Name>`` into (context, version, name).

    Raises ValueError for a name outside that pattern.
    """
    m = _PACKAGE.match(full_name)
    if not m:
        raise ValueError(f"message {full_name!r} is not metallo.<context>.v<N>.<Name>")
    # Cached: routing keys and contract versions derive from it for every message.
    return m["context"], m["version"], m["name"]


def full_name(message: Message | type[Message]) -> str:
    """The fully-qualified protobuf name of a message or message class."""
    return message.DESCRIPTOR.full_name
