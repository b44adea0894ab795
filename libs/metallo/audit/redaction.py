"""Redaction of what an audit record keeps of a request (docs/operators.md, Audit).

An audit summary is the request's own fields, never its secrets: a field whose
name says it holds a secret or log text (:data:`SECRET_WORDS`) is replaced by
:data:`REDACTED`, and any value that looks like a credential — a ``psb_`` grant,
a JWT, a ``Bearer`` header, a GitLab token, a password in a URL — is replaced
inside the text it appears in. Control characters are kept escaped (``\\x00``),
since PostgreSQL stores no NUL in text or jsonb. Strings are cut to :data:`MAX_STRING` characters,
collections to :data:`MAX_ITEMS` entries, and the whole summary to
:data:`MAX_SUMMARY` characters of JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

REDACTED = "[redacted]"
MAX_STRING = 200
MAX_ITEMS = 32
MAX_SUMMARY = 2000

#: Words of a field name (``snake_case`` or ``kebab-case`` parts) whose field's value
#: is never kept: credentials, hashes of them, log text.
SECRET_WORDS = frozenset({
    "token", "tokens", "secret", "secrets", "password", "passwd", "credential",
    "credentials", "authorization", "cookie", "private", "text", "log",
})

# Credential shapes found inside free text (a reason, a label, a URL).
_SECRETS = (
    re.compile(r"(?i)bearer\s+[A-Za-z0-9._~+/=\-]{8,}"),                    # bearer headers
    re.compile(r"psb_[A-Za-z0-9_\-]{8,}"),                                  # command grants
    re.compile(r"eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"),  # JWTs
    re.compile(r"glpat-[A-Za-z0-9_\-]{8,}"),                                # GitLab tokens
    re.compile(r"(?<=://)[^/@\s:]*:[^/@\s]*(?=@)"),                          # user:password@
)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _escape_controls(value: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)


def redact_text(value: str) -> str:
    """``value`` with every credential-shaped part replaced by :data:`REDACTED` and
    control characters escaped, cut to :data:`MAX_STRING` characters."""
    value = _escape_controls(value)
    for pattern in _SECRETS:
        value = pattern.sub(REDACTED, value)
    return value if len(value) <= MAX_STRING else value[:MAX_STRING] + "…"


def secret_field(name: str) -> bool:
    """Whether a field called ``name`` holds a secret or log text (:data:`SECRET_WORDS`)."""
    return any(word in SECRET_WORDS for word in re.split(r"[_\-.\s]+", name.lower()))


def redact(value: Any, key: str = "") -> Any:
    """A JSON-shaped ``value`` redacted (see module doc); ``key`` is the field it came from."""
    if key and secret_field(key):
        return REDACTED
    if isinstance(value, Mapping):
        items = list(value.items())[:MAX_ITEMS]
        return {_escape_controls(str(k))[:64]: redact(v, str(k)) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [redact(v, key) for v in list(value)[:MAX_ITEMS]]
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    return redact_text(str(value))


def request_summary(message: Message) -> dict[str, Any]:
    """The redacted summary of a command: its fields except ``metadata`` (kept in
    their own audit columns), as protobuf JSON names; bounded to :data:`MAX_SUMMARY`
    characters (a longer one keeps only its field names)."""
    fields = MessageToDict(message, preserving_proto_field_name=True)
    fields.pop("metadata", None)
    summary = redact(fields)
    if len(json.dumps(summary)) > MAX_SUMMARY:
        return {"fields": sorted(summary)[:MAX_ITEMS], "truncated": True}
    return summary
