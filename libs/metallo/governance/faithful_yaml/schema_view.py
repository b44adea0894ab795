"""Just enough JSON Schema navigation to know which JSON types a location of a
document allows (the loader keeps a scalar as text where the schema wants text)."""

from __future__ import annotations

import re
from typing import Any


class SchemaView:
    """Just enough JSON Schema navigation to know which types a location allows."""

    def __init__(self, root: dict):
        self.root = root

    def deref(self, schema: Any) -> dict:
        """``schema`` with its local ``$ref`` chain followed ({} when unresolvable)."""
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            ref = schema["$ref"]
            if not ref.startswith("#/"):
                return {}
            node: Any = self.root
            for part in ref[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
            schema = node
            seen += 1
        return schema if isinstance(schema, dict) else {}

    def branches(self, schema: Any) -> list[dict]:
        """``schema`` and every ``oneOf``/``anyOf``/``allOf`` branch below it."""
        s = self.deref(schema)
        out = [s]
        for k in ("oneOf", "anyOf", "allOf"):
            for sub in s.get(k, []):
                out.extend(self.branches(sub))
        return out

    def types(self, schema: Any) -> set[str] | None:
        """Allowed JSON types, or None when unconstrained."""
        found: set[str] = set()
        constrained = False
        for b in self.branches(schema):
            t = b.get("type")
            if isinstance(t, str):
                found.add(t)
                constrained = True
            elif isinstance(t, list):
                found.update(t)
                constrained = True
            if "const" in b or "enum" in b:
                values = [b["const"]] if "const" in b else b["enum"]
                for v in values:
                    found.add(json_type(v))
                constrained = True
        return found if constrained else None

    def child(self, schema: Any, key: str | int) -> Any:
        """The sub-schema for a mapping key or sequence index (None when unknown)."""
        for b in self.branches(schema):
            if isinstance(key, int):
                if "items" in b and isinstance(b["items"], dict):
                    return b["items"]
                continue
            props = b.get("properties", {})
            if key in props:
                return props[key]
            for pattern, sub in b.get("patternProperties", {}).items():
                if re.search(pattern, key):
                    return sub
            ap = b.get("additionalProperties")
            if isinstance(ap, dict):
                return ap
        return None


def json_type(v: Any) -> str:
    """The JSON Schema type name of a loaded value (``integer``, ``string``, ...)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"
