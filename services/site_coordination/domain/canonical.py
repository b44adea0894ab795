"""Canonical JSON (docs/site-commands.md): sorted keys, no insignificant whitespace."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Serialise ``value`` as canonical JSON text (UTF-8 characters kept, keys sorted).

    Raises ValueError for NaN/Infinity, which JSON cannot carry.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def sha256_hex(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def json_depth_ok(raw: bytes, max_depth: int) -> bool:
    """True when no object/array in ``raw`` nests deeper than ``max_depth``.

    Scans bytes without parsing so a hostile document cannot exhaust the
    parser's recursion (DESIGN.md: bounded inputs). Brackets inside strings
    are ignored.
    """
    depth = 0
    in_string = False
    escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
            continue
        if byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > max_depth:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True
