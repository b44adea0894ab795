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

from google.protobuf.message import Message

import metallo

_PACKAGE = re.compile(r"^metallo\.(?P<context>[a-z_]+)\.(?P<version>v\d+)\.(?P<name>[A-Za-z0-9_]+)$")


def _messages_of(modules) -> dict[str, type[Message]]:
    found: dict[str, type[Message]] = {}
    for name in modules:
        module = importlib.import_module(name)
        for desc in module.DESCRIPTOR.message_types_by_name.values():
            found[desc.full_name] = getattr(module, desc.name)
    return found


def _pb2_modules(package: str, path) -> list[str]:
    # iter_modules lists without importing: walk_packages would import every
    # package of metallo (SQLAlchemy, jsonschema, …), a quarter second per CLI command.
    return [f"{package}.{m.name}" for m in pkgutil.iter_modules(path) if m.name.endswith("_pb2")]


@lru_cache(maxsize=1)
def _all_messages() -> dict[str, type[Message]]:
    modules: list[str] = []
    for context in pkgutil.iter_modules(metallo.__path__):
        if not context.ispkg:
            continue
        for version in pkgutil.iter_modules([f"{context.module_finder.path}/{context.name}"]):
            if version.ispkg and re.fullmatch(r"v\d+", version.name):
                package = f"metallo.{context.name}.{version.name}"
                modules += _pb2_modules(package, [f"{version.module_finder.path}/{version.name}"])
    return _messages_of(modules)


@lru_cache(maxsize=64)
def _messages_in(context: str, version: str) -> dict[str, type[Message]]:
    """The generated messages of ``metallo.<context>.<version>`` only (empty when absent)."""
    try:
        package = importlib.import_module(f"metallo.{context}.{version}")
    except ImportError:
        return {}
    return _messages_of(_pb2_modules(package.__name__, package.__path__))


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
