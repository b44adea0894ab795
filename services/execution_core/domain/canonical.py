"""Canonical JSON and the material digest (docs/site-commands.md; seed 004 §3C).

Canonical JSON: keys sorted, no insignificant whitespace, UTF-8, no NaN.
The material digest is the sha256 (hex) of the canonical JSON of
``{"spec": …, "repository": …, "member": …}`` — the exact material a Site must
authorise before it executes an Attempt.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Return ``value`` as canonical JSON text (sorted keys, compact separators).

    Raises ValueError for values JSON cannot carry exactly (NaN, infinities).
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_hex(text: str) -> str:
    """sha256 of the UTF-8 bytes of ``text``, lower-case hex (64 characters)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def material_digest(
    spec: dict[str, Any], repository: dict[str, Any], member: dict[str, Any]
) -> str:
    """Digest of an Attempt's material: sha256 hex of canonical ``{spec, repository, member}``.

    ``repository`` is ``{"url", "commit", "branch"}``; ``member`` is
    ``{"id", "site_username", "account"}`` (docs/site-commands.md, prepare payload).
    """
    return sha256_hex(canonical_json({"spec": spec, "repository": repository, "member": member}))
